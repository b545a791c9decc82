"""The untouched steady demo of `make run`, for 30 simulated minutes: no alert fires.

The demo as `manage.py seed_demo` makes it (its v1 table, its seeded alert rules) and the
fleet `make run` simulates (`simulate_fleet --devices 100 --rate 5`, steady scenario), run on
the simulator's virtual clock (`edge_sdk.simulate.virtual`): the simulator's own devices,
links, loads and cloud queue, and the SDK's own routing, fallback, timeouts, cache and
telemetry events. Every 15 simulated seconds the devices' batches go through the real ingest
service (landed at that simulated moment), are processed into rollups, and the fleet's rules
are judged at that moment as Celery beat judges them.
"""

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from edge_sdk.simulate.__main__ import add_arguments, config_from_args
from edge_sdk.simulate.virtual import VirtualFleet
from routing_policies.demo import DEMO_FLEET, DEMO_FLEET_KEY, demo_seed
from routing_policies.models import Device, Fleet, PolicyVersion
from routing_policies.selectors import version_document
from routing_policies.services import device_enroll
from telemetry.alerts.models import AlertEvent, AlertRule
from telemetry.alerts.services import alerts_evaluate
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest
from telemetry.models import Event

pytestmark = pytest.mark.integration

MINUTES = 30
STEP_S = 15  # Celery beat's ALERT_EVALUATE_INTERVAL_S
# `make run`'s simulated fleet: the flags the Makefile passes (SIM_DEVICES, SIM_RATE defaults).
MAKE_RUN_FLAGS = ["--devices", "100", "--rate", "5", "--connect-rate", "20", "--progress", "30"]


def _make_run_config() -> Any:
    parser = argparse.ArgumentParser()
    add_arguments(parser, url_required=False, fleet_key_required=False)
    args = parser.parse_args(MAKE_RUN_FLAGS)
    args.fleet_key = DEMO_FLEET_KEY
    return config_from_args(args)


def _process_all() -> None:
    while landed_batches_process().batches:
        pass


def test_steady_demo__30_simulated_minutes__no_alert_pending_or_firing(db: None) -> None:
    # Given the demo as `make run` seeds it, and its simulated fleet enrolled
    demo_seed()
    fleet = Fleet.objects.get(slug=DEMO_FLEET)
    document = version_document(version=PolicyVersion.objects.get(fleet=fleet, number=1))
    # The simulated half hour ends a minute ago (ingest refuses events from the future).
    start = (timezone.now() - timedelta(minutes=MINUTES + 1)).replace(second=0, microsecond=0)
    simulated = VirtualFleet(_make_run_config(), document, wall_start=start.timestamp())
    for device_id in simulated.fleet.devices:
        device_enroll(fleet_key=DEMO_FLEET_KEY, device_id=device_id, platform="android")
    devices = {device.device_id: device for device in Device.objects.filter(fleet=fleet)}

    # When it runs for 30 simulated minutes, its telemetry delivered and the rules judged
    # every 15 simulated seconds
    sent = accepted = 0
    try:
        for _ in range(MINUTES * 60 // STEP_S):
            batches = simulated.advance(STEP_S)
            now = datetime.fromtimestamp(simulated.wall_time(), UTC)
            for device_id, body in batches:
                result = telemetry_batch_ingest(device=devices[device_id], body=body, now=now)
                sent += body.count(b'"event_id"')
                accepted += result.accepted
            _process_all()
            alerts_evaluate(fleet_id=fleet.pk, now=now)
    finally:
        simulated.close()

    # Then every event the fleet sent was accepted and stored: real traffic, about 5 a second
    assert accepted == sent == Event.objects.filter(fleet=fleet).count()
    assert 0.8 * 5 * 60 * MINUTES < accepted < 1.2 * 5 * 60 * MINUTES
    # ... and no rule ever went pending or fired (the alerts page's history is empty of them)
    raised = AlertEvent.objects.filter(fleet=fleet, kind__in=["pending", "firing"])
    assert list(raised.values_list("rule_name", "message")) == []
    # ... and at the end every seeded rule reads ok: judged on enough samples, and healthy
    states = dict(AlertRule.objects.filter(fleet=fleet).values_list("name", "state"))
    assert len(states) == 7
    assert set(states.values()) == {"ok"}, states
