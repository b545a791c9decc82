"""Publishing asks the decision function whether a cell could send sensitive data off the
device where the cell forbids it; such a draft is refused naming the cell."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from edge_sdk.decision import Cell
from routing_policies.cell_schema import DEFAULT_CELL_VALUES
from routing_policies.documents import cell_document
from routing_policies.models import PolicyCell, PolicyVersion
from routing_policies.policies.sdk_cells import sends_sensitive_data_off_device
from routing_policies.services import policy_draft_create

pytestmark = pytest.mark.django_db

SENSITIVE = ("text", "interactive", "sensitive")


def _cell(**values: Any) -> Cell:
    return Cell.from_document(cell_document(SENSITIVE, {**DEFAULT_CELL_VALUES, **values}))


@pytest.mark.parametrize(
    ("values", "leaks"),
    [
        ({"mode": "cloud_only", "upload.allowed": False}, True),
        ({"mode": "cloud_only", "upload.allowed": True}, False),
        ({"mode": "auto", "upload.allowed": False}, False),
        ({"mode": "draft_refine", "upload.allowed": False}, False),
        ({"mode": "device_only", "upload.allowed": False}, False),
    ],
)
def test_sends_sensitive_data_off_device__each_mode__only_cloud_only_without_upload(
    values: dict[str, Any], leaks: bool
) -> None:
    assert sends_sensitive_data_off_device(_cell(**values)) is leaks


def test_publish__draft_would_send_sensitive_data_to_cloud__400_names_cell_still_draft(
    fleet: Any, publisher: Any, client_as: Any
) -> None:
    # Given a draft whose sensitive text/interactive cell is cloud_only with uploads forbidden
    # (written straight to the table, as a draft saved before the editor refused it)
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    PolicyCell.objects.filter(
        version=draft, task_type="text", latency_budget="interactive", privacy_tier="sensitive"
    ).update(mode="cloud_only", upload_allowed=False)
    client: APIClient = client_as(publisher)

    # When it is published
    response = client.post(
        f"/api/v1/fleets/{fleet.slug}/draft/publish/",
        {"revision": draft.revision, "note": "more cloud"},
        format="json",
    )

    # Then 400 names the cell and the privacy problem, and it stays a draft
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {"field": "privacy", "cell": "text/interactive/sensitive"} in [
        {"field": d["field"], "cell": d.get("cell")} for d in details
    ], details
    assert PolicyVersion.objects.filter(pk=draft.pk, number__isnull=True).exists()
