"""`manage.py mqtt_access sync` when it cannot work: a clear error, never a traceback."""

from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from routing_policies.broker_access import services

pytestmark = pytest.mark.django_db


def test_mqtt_access_sync__dynsec_not_configured__error_names_the_settings(settings: Any) -> None:
    # Given the MQTT link off (the embedded default)
    settings.MQTT_ACCESS = ""

    # When the reconcile is run
    # Then it stops with an error naming what is missing
    with pytest.raises(CommandError, match="MQTT_ACCESS=dynsec"):
        call_command("mqtt_access", "sync")


def test_mqtt_access_sync__broker_unreachable__error_and_counted(settings: Any) -> None:
    # Given dynamic security configured on a broker that is not there
    settings.MQTT_ACCESS = "dynsec"
    settings.MQTT_URL = "mqtt://127.0.0.1:9"
    settings.MQTT_DYNSEC_USERNAME, settings.MQTT_DYNSEC_PASSWORD = "admin", "pw"
    failures = services.FAILURES["sync"]

    # When the reconcile is run
    # Then it fails with the reason, and the failure is counted
    with pytest.raises(CommandError, match="could not be synced"):
        call_command("mqtt_access", "sync")
    assert services.FAILURES["sync"] == failures + 1


def test_device_enroll__broker_unreachable__enrolled_and_failure_counted(
    settings: Any, fleet: Any, fleet_key: str, django_capture_on_commit_callbacks: Any
) -> None:
    # Given dynamic security configured on a broker that is not there
    settings.MQTT_ACCESS = "dynsec"
    settings.MQTT_URL = "mqtt://127.0.0.1:9"
    failures = services.FAILURES["grant"]

    # When a device enrols
    with django_capture_on_commit_callbacks(execute=True):
        response = APIClient().post(
            "/api/v1/devices/enroll", {"fleet_key": fleet_key, "device_id": "p1"}, format="json"
        )

    # Then it is enrolled all the same (WebSocket and polling work), the failure counted
    assert response.status_code == 201, response.content
    assert services.FAILURES["grant"] == failures + 1
