"""The cell field `shadow_refine_rate`: its range, the privacy refusal, the document devices get,
import/export, diff and audit, and how the SDK's policy parser reads what the server sends."""

import math
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from edge_sdk.policy import PolicyDocumentError, parse_policy
from routing_policies.cell_schema import DEFAULT_CELL_VALUES, SEED_DIMENSIONS, CellKey
from routing_policies.demo import demo_table
from routing_policies.documents import build_document, cell_document
from routing_policies.models import AuditEntry, PolicyCell, PolicyVersion
from routing_policies.policies.sdk_cells import privacy_problems, shadow_refine_rates
from routing_policies.selectors import version_document, version_get
from routing_policies.services import policy_draft_create, policy_version_publish
from routing_policies.validation import validate_cell

FLEET = "/api/v1/fleets/fleet-a"
NORMAL: CellKey = ("text", "interactive", "normal")
LOCAL_ONLY: CellKey = ("voice", "interactive", "sensitive")  # the demo forbids its uploads
VOICE_NORMAL = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}
VOICE_SENSITIVE = {
    "task_type": "voice",
    "latency_budget": "interactive",
    "privacy_tier": "sensitive",
}


def _cell(**overrides: Any) -> dict[str, Any]:
    values = dict(DEFAULT_CELL_VALUES)
    values.update({path.replace("__", "."): value for path, value in overrides.items()})
    return values


def _document(table: dict[CellKey, dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    document = build_document(
        fleet_slug="fleet-a",
        number=None,
        published_at=None,
        dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
        table=table if table is not None else demo_table(),
    )
    return {**document, **extra}


# --- validation ------------------------------------------------------------------------------


def test_validate_cell__no_shadow_refine_rate__valid_with_rate_0() -> None:
    # Given a cell written before the field existed
    values = _cell()
    del values["shadow_refine_rate"]

    # When it is validated
    cleaned, problems = validate_cell(NORMAL, values)

    # Then it is valid and its rate is 0
    assert problems == []
    assert cleaned["shadow_refine_rate"] == 0.0


@pytest.mark.parametrize("rate", [0.0, 0.01, 0.05])
def test_validate_cell__rate_within_0_to_5_percent_and_uploads_allowed__kept(rate: float) -> None:
    # Given a cell that allows uploads, with a rate in [0, 0.05]
    # When it is validated
    cleaned, problems = validate_cell(NORMAL, _cell(shadow_refine_rate=rate))

    # Then the rate is kept as given
    assert problems == []
    assert cleaned["shadow_refine_rate"] == rate


@pytest.mark.parametrize(
    "rate", [0.0500001, 0.5, 1.0, -0.01, math.nan, math.inf, True, "0.01", None]
)
def test_validate_cell__rate_out_of_range_or_not_a_number__refused_naming_it(rate: Any) -> None:
    # Given a rate above 5%, negative, or not a finite number
    # When it is validated
    cleaned, problems = validate_cell(NORMAL, _cell(shadow_refine_rate=rate))

    # Then exactly that field is refused, never clamped
    assert [(p.cell, p.field) for p in problems] == [
        ("text/interactive/normal", "shadow_refine_rate")
    ]
    assert "shadow_refine_rate" not in cleaned


@pytest.mark.parametrize("tier", ["sensitive", "normal"])
def test_validate_cell__rate_above_0_where_uploads_forbidden__refused_naming_it(tier: str) -> None:
    # Given a cell (sensitive or not) that forbids uploads, with a shadow refine rate
    key: CellKey = ("text", "interactive", tier)
    values = _cell(shadow_refine_rate=0.01, upload__allowed=False, mode="device_only")

    # When it is validated
    _, problems = validate_cell(key, values)

    # Then the rate is refused: a shadow refine would send the draft to the cloud
    assert [(p.cell, p.field) for p in problems] == [
        (f"text/interactive/{tier}", "shadow_refine_rate")
    ]
    assert "uploads are not allowed" in problems[0].message


def test_validate_cell__rate_0_where_uploads_forbidden__valid() -> None:
    # Given a local-only cell with no shadow refines
    values = _cell(shadow_refine_rate=0.0, upload__allowed=False, mode="device_only")

    # When it is validated
    _, problems = validate_cell(LOCAL_ONLY, values)

    # Then nothing is wrong
    assert problems == []


def test_privacy_problems__stored_rate_where_uploads_forbidden__refused_at_publish() -> None:
    # Given a table whose local-only cell carries a rate (stored before the rule, say)
    table = demo_table()
    table[LOCAL_ONLY] = {**table[LOCAL_ONLY], "shadow_refine_rate": 0.02}

    # When publishing checks its privacy
    problems = privacy_problems(table)

    # Then that cell's rate is named; shadow_refine_rates reads it as 0 as devices do
    assert [(p.cell, p.field) for p in problems] == [
        ("voice/interactive/sensitive", "shadow_refine_rate")
    ]
    assert shadow_refine_rates(table)[LOCAL_ONLY] == 0.0


# --- the document ----------------------------------------------------------------------------


def test_cell_document__rate_0__field_left_out_so_old_documents_are_unchanged() -> None:
    # Given a cell at the default rate
    # When its document is built
    document = cell_document(NORMAL, _cell())

    # Then the field is absent (devices read 0), as in documents published before it existed
    assert "shadow_refine_rate" not in document


def test_cell_document__rate_above_0__sent_to_devices() -> None:
    # Given a cell with a rate of 2%
    # When its document is built
    document = cell_document(NORMAL, _cell(shadow_refine_rate=0.02))

    # Then the field is at the top level of the cell, as PROTOCOL.md describes it
    assert document["shadow_refine_rate"] == 0.02


@pytest.mark.django_db
def test_published_document__rate_set_in_draft__device_document_carries_it(
    client_as: Callable[[Any], APIClient], editor: Any, publisher: Any, fleet: Any
) -> None:
    # Given a draft of v1 with a 3% shadow refine rate in voice/interactive/normal
    draft = policy_draft_create(actor=editor, fleet=fleet)
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {
            "revision": draft.revision,
            "cells": [{**VOICE_NORMAL, "values": {"shadow_refine_rate": 0.03}}],
        },
        format="json",
    )
    assert response.status_code == 200, response.content

    # When it is published as v2
    policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision + 1, note="shadow refines 3%"
    )
    document = version_document(version=version_get(fleet=fleet, ref="2"))

    # Then the pushed document carries the rate in that cell only, and the SDK reads it
    rates = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c["shadow_refine_rate"]
        for c in document["cells"]
        if "shadow_refine_rate" in c
    }
    assert rates == {("voice", "interactive", "normal"): 0.03}
    policy = parse_policy(document)
    assert policy.table.shadow_rates == {("voice", "interactive", "normal"): 0.03}
    # and v1, published before, still has no such field in any cell
    v1 = version_document(version=version_get(fleet=fleet, ref="1"))
    assert not any("shadow_refine_rate" in cell for cell in v1["cells"])


# --- the API: edits, refusals, import, diff, audit --------------------------------------------


@pytest.mark.django_db
def test_draft_cells_api__rate_where_uploads_forbidden__400_names_field_nothing_stored(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given a draft whose voice/interactive/sensitive cell forbids uploads
    draft = policy_draft_create(actor=editor, fleet=fleet)
    audit_before = AuditEntry.objects.count()

    # When an editor gives that cell a shadow refine rate
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {
            "revision": draft.revision,
            "cells": [{**VOICE_SENSITIVE, "values": {"shadow_refine_rate": 0.01}}],
        },
        format="json",
    )

    # Then 400 names the cell and the field; nothing is stored
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {(d.get("cell"), d["field"]) for d in details} == {
        ("voice/interactive/sensitive", "shadow_refine_rate")
    }
    draft.refresh_from_db()
    assert draft.revision == 1
    assert AuditEntry.objects.count() == audit_before
    assert not PolicyCell.objects.filter(version=draft, shadow_refine_rate__gt=0).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("rate", [0.06, -0.01, 1])
def test_draft_cells_api__rate_out_of_range__400_names_field(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any, rate: float
) -> None:
    # Given a draft
    draft = policy_draft_create(actor=editor, fleet=fleet)

    # When a cell's rate is set outside [0, 0.05]
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {
            "revision": draft.revision,
            "cells": [{**VOICE_NORMAL, "values": {"shadow_refine_rate": rate}}],
        },
        format="json",
    )

    # Then 400 names the field and the draft is unchanged
    assert response.status_code == 400, response.content
    fields = {d["field"] for d in response.json()["error"]["details"]}
    assert any(field.endswith("shadow_refine_rate") for field in fields), fields
    draft.refresh_from_db()
    assert draft.revision == 1


@pytest.mark.django_db
def test_draft_cells_api__forbid_uploads_of_a_shadowed_cell__400_names_rate(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given a draft whose voice/interactive/normal cell shadow-refines 2%
    client = client_as(editor)
    draft = policy_draft_create(actor=editor, fleet=fleet)
    client.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [{**VOICE_NORMAL, "values": {"shadow_refine_rate": 0.02}}]},
        format="json",
    )

    # When its uploads are then forbidden
    response = client.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 2, "cells": [{**VOICE_NORMAL, "values": {"upload.allowed": False}}]},
        format="json",
    )

    # Then it is refused naming the rate (set it to 0 first)
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {(d.get("cell"), d["field"]) for d in details} == {
        ("voice/interactive/normal", "shadow_refine_rate")
    }
    draft.refresh_from_db()
    assert draft.revision == 2


@pytest.mark.django_db
def test_draft_cells_api__rate_changed__diff_and_audit_name_it(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given a draft of v1
    client = client_as(editor)
    policy_draft_create(actor=editor, fleet=fleet)

    # When voice/interactive/normal gets a 1% shadow refine rate
    response = client.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [{**VOICE_NORMAL, "values": {"shadow_refine_rate": 0.01}}]},
        format="json",
    )
    assert response.status_code == 200, response.content

    # Then the diff against v1 and the audit entry name the field with before and after
    diff = client.get(f"{FLEET}/diff/?a=1&b=draft").json()
    assert diff["cells"] == [
        {
            "cell": "voice/interactive/normal",
            "status": "changed",
            "fields": [{"field": "shadow_refine_rate", "before": 0.0, "after": 0.01}],
        }
    ]
    entry = AuditEntry.objects.first()
    assert entry is not None
    assert entry.action == "policy_cells.updated"
    assert entry.before == {"voice/interactive/normal.shadow_refine_rate": 0.0}
    assert entry.after == {"voice/interactive/normal.shadow_refine_rate": 0.01}


@pytest.mark.django_db
def test_draft_import_api__document_without_the_field__cells_at_0(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given a document of before the field (no cell names it)
    document = _document()
    assert not any("shadow_refine_rate" in cell for cell in document["cells"])

    # When it is imported
    response = client_as(editor).put(f"{FLEET}/draft/document", document, format="json")

    # Then every cell of the draft has rate 0
    assert response.status_code == 200, response.content
    draft = PolicyVersion.objects.get(fleet=fleet, published_at__isnull=True)
    assert set(
        PolicyCell.objects.filter(version=draft).values_list("shadow_refine_rate", flat=True)
    ) == {0.0}


@pytest.mark.django_db
def test_export_then_import__rate_set__round_trips(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given a document with a 4% rate in text/interactive/normal
    table = demo_table()
    table[NORMAL] = {**table[NORMAL], "shadow_refine_rate": 0.04}
    client = client_as(editor)

    # When it is imported and the draft exported again
    response = client.put(f"{FLEET}/draft/document", _document(table), format="json")
    assert response.status_code == 200, response.content
    exported = client.get(f"{FLEET}/versions/draft/document").json()

    # Then the exported document carries the same rate in the same cell, and no other
    rates = {
        (c["task_type"], c["latency_budget"], c["privacy_tier"]): c["shadow_refine_rate"]
        for c in exported["cells"]
        if "shadow_refine_rate" in c
    }
    assert rates == {NORMAL: 0.04}


@pytest.mark.django_db
def test_draft_import_api__rate_where_uploads_forbidden__400_names_cell_and_field(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given a document whose local-only cell shadow-refines
    document = _document()
    for cell in document["cells"]:
        if (cell["task_type"], cell["latency_budget"], cell["privacy_tier"]) == LOCAL_ONLY:
            cell["shadow_refine_rate"] = 0.01

    # When it is imported
    response = client_as(editor).put(f"{FLEET}/draft/document", document, format="json")

    # Then 400 names that cell's field; no draft is made
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert {(d.get("cell"), d["field"]) for d in details} == {
        ("voice/interactive/sensitive", "shadow_refine_rate")
    }
    assert not PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).exists()


# --- the SDK's policy parser -----------------------------------------------------------------


def _sdk_document(**cell_extra: Any) -> dict[str, Any]:
    document = _document()
    document["version"] = 3
    for cell in document["cells"]:
        if (cell["task_type"], cell["latency_budget"], cell["privacy_tier"]) == NORMAL:
            cell.update(cell_extra)
    return document


def test_sdk_parse_policy__no_field__every_rate_0() -> None:
    # Given a document of an old server (no cell has the field)
    # When the SDK parses it
    policy = parse_policy(_sdk_document())

    # Then no cell shadow-refines
    assert policy.table.shadow_rates == {}


def test_sdk_parse_policy__rate_set__read_for_that_cell() -> None:
    # Given a document where text/interactive/normal shadow-refines 5%
    # When the SDK parses it
    policy = parse_policy(_sdk_document(shadow_refine_rate=0.05))

    # Then that cell's rate is 0.05
    assert policy.table.shadow_rates == {NORMAL: 0.05}


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan, "0.01", True, None])
def test_sdk_parse_policy__rate_not_a_share__document_refused_naming_field(rate: Any) -> None:
    # Given a document with an unusable rate
    # When the SDK parses it
    # Then the document is refused (the current policy stays), naming the field
    with pytest.raises(PolicyDocumentError, match="shadow_refine_rate"):
        parse_policy(_sdk_document(shadow_refine_rate=rate))


def test_sdk_parse_policy__rate_where_uploads_forbidden__read_as_0() -> None:
    # Given a (non-conforming) document whose upload-forbidding cell carries a rate
    document = _sdk_document(
        shadow_refine_rate=0.05, upload={"allowed": False, "deidentify": True, "max_bytes": 0}
    )

    # When the SDK parses it
    policy = parse_policy(document)

    # Then the device never shadow-refines that cell
    assert policy.table.shadow_rates == {}
