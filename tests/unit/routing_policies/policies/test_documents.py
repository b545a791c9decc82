"""The policy document of PROTOCOL.md: its shape, its ETag, diffs, and agreement with the SDK."""

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from edge_sdk.decision import Cell
from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document, diff_tables, document_etag
from routing_policies.selectors import version_document, version_get

pytestmark = pytest.mark.django_db

CELL_KEYS = {
    "task_type",
    "latency_budget",
    "privacy_tier",
    "mode",
    "threshold",
    "weights",
    "length_norm_tokens",
    "latency_budget_ms",
    "cloud_timeout_ms",
    "fallback",
    "upload",
    "network",
    "load",
    "cache_ttl_s",
}
NESTED_KEYS = {
    "weights": {"length", "intent", "lm"},
    "upload": {"allowed", "deidentify", "max_bytes"},
    "network": {"rtt_high_ms", "bandwidth_low_kbps", "theta_raise"},
    "load": {"busy", "theta_lower"},
}


def _seed_dimensions() -> dict[str, list[str]]:
    return {name: list(values) for name, values in SEED_DIMENSIONS.items()}


def _document(table: dict[Any, dict[str, Any]], number: int | None = 1) -> dict[str, Any]:
    return build_document(
        fleet_slug="fleet-a",
        number=number,
        published_at=datetime(2026, 11, 29, 15, 0, tzinfo=UTC),
        dimensions=_seed_dimensions(),
        table=table,
    )


def test_version_document__published_demo__has_exactly_the_protocol_shape(fleet: Any) -> None:
    # Given the demo fleet published as v1
    version = version_get(fleet=fleet, ref=1)

    # When its document is built
    document = version_document(version=version)

    # Then it has exactly the top-level fields of PROTOCOL.md
    assert set(document) == {
        "fleet",
        "version",
        "etag",
        "published_at",
        "dimensions",
        "cells",
    }
    assert document["fleet"] == "fleet-a"
    assert document["version"] == 1
    assert re.fullmatch(r'"v1-[0-9a-f]{16}"', document["etag"])
    assert document["published_at"].endswith("Z")
    assert datetime.fromisoformat(document["published_at"]) == version.published_at
    assert document["dimensions"] == SEED_DIMENSIONS
    # every combination once, in the dimensions' order (voice/interactive/sensitive first)
    keys = [(c["task_type"], c["latency_budget"], c["privacy_tier"]) for c in document["cells"]]
    assert len(keys) == len(set(keys)) == 12
    assert keys[0] == ("voice", "interactive", "sensitive")
    # and every cell has exactly the protocol's fields, nested as in the protocol
    for cell in document["cells"]:
        assert set(cell) == CELL_KEYS
        for group, fields in NESTED_KEYS.items():
            assert set(cell[group]) == fields


def test_version_document__demo_cell__carries_the_demo_values_with_json_types(fleet: Any) -> None:
    # Given the demo fleet published as v1
    document = version_document(version=version_get(fleet=fleet, ref=1))

    # When the voice / interactive / normal cell is read
    cell = next(
        c
        for c in document["cells"]
        if (c["task_type"], c["latency_budget"], c["privacy_tier"])
        == ("voice", "interactive", "normal")
    )

    # Then it holds the demo's values with numbers, whole numbers and booleans as such
    assert cell["mode"] == "auto"
    assert cell["threshold"] == 0.65
    assert cell["weights"] == {"length": 0.4, "intent": 0.3, "lm": 0.3}
    assert cell["latency_budget_ms"] == 300
    assert isinstance(cell["latency_budget_ms"], int)
    assert cell["upload"] == {"allowed": True, "deidentify": True, "max_bytes": 262_144}
    assert cell["network"] == {"rtt_high_ms": 200, "bandwidth_low_kbps": 500, "theta_raise": 0.15}
    assert cell["load"] == {"busy": 0.8, "theta_lower": 0.1}
    assert cell["cache_ttl_s"] == 600


def test_document_etag__same_content__same_etag_every_time(fleet: Any) -> None:
    # Given the published v1 of the demo fleet
    version = version_get(fleet=fleet, ref=1)

    # When its document is built twice, and the same table is rendered again from scratch
    first = version_document(version=version)
    second = version_document(version=version)
    rebuilt = build_document(
        fleet_slug="fleet-a",
        number=1,
        published_at=version.published_at,
        dimensions=_seed_dimensions(),
        table=demo_table(),
    )

    # Then every rendering carries the ETag stored at publish time
    assert first["etag"] == second["etag"] == rebuilt["etag"] == version.etag


def test_document_etag__key_order__does_not_matter() -> None:
    # Given the same content with its keys in two different orders
    content = {"fleet": "fleet-a", "dimensions": _seed_dimensions(), "cells": []}
    reordered = {
        "cells": [],
        "dimensions": dict(reversed(_seed_dimensions().items())),
        "fleet": "fleet-a",
    }

    # When / Then both get the same ETag
    assert document_etag(3, content) == document_etag(3, reordered)


def test_document_etag__one_value_changed__different_etag() -> None:
    # Given the demo table and a copy with one threshold changed
    table = demo_table()
    changed = demo_table()
    changed[("voice", "interactive", "normal")]["threshold"] = 0.7

    # When both are rendered as v1
    original_etag = _document(table)["etag"]
    changed_etag = _document(changed)["etag"]

    # Then their ETags differ, so devices polling with If-None-Match get the new table
    assert original_etag != changed_etag


def test_build_document__draft__has_no_number_etag_or_publication_time() -> None:
    # Given a draft (no number)
    # When its document is built
    document = build_document(
        fleet_slug="fleet-a",
        number=None,
        published_at=None,
        dimensions=_seed_dimensions(),
        table=demo_table(),
    )

    # Then it carries no version, ETag or publication time
    assert (document["version"], document["etag"], document["published_at"]) == (None, "", None)


def test_sdk_cell_from_document__every_cell_of_the_demo_document__accepted_unchanged(
    fleet: Any, client_as: Any, viewer: Any
) -> None:
    # Given the demo document as a device receives it over HTTP (JSON)
    response = client_as(viewer).get("/api/v1/fleets/fleet-a/versions/1/document")
    cells = response.json()["cells"]

    # When the SDK parses every cell
    parsed = [Cell.from_document(cell) for cell in cells]

    # Then each is accepted and renders back to exactly the server's cell: one contract
    assert len(parsed) == 12
    assert [cell.to_document() for cell in parsed] == cells


def test_diff_tables__changed_and_added_cells__named_with_fields() -> None:
    # Given the demo table, and a copy with one θ raised and task type `code` added
    before = demo_table()
    after = demo_table()
    after[("voice", "interactive", "normal")]["threshold"] = 0.7
    after_dimensions = {**_seed_dimensions(), "task_type": ["voice", "text", "image", "code"]}
    for budget in SEED_DIMENSIONS["latency_budget"]:
        for tier in SEED_DIMENSIONS["privacy_tier"]:
            after[("code", budget, tier)] = dict(after[("text", budget, tier)])

    # When they are diffed
    diff = diff_tables(_seed_dimensions(), before, after_dimensions, after)

    # Then the new dimension value, the changed field and the four new cells are named
    assert diff["dimensions"] == {"task_type": {"added": ["code"], "removed": []}}
    changed = [c for c in diff["cells"] if c["status"] == "changed"]
    assert changed == [
        {
            "cell": "voice/interactive/normal",
            "status": "changed",
            "fields": [{"field": "threshold", "before": 0.65, "after": 0.7}],
        }
    ]
    added = sorted(c["cell"] for c in diff["cells"] if c["status"] == "added")
    assert added == [
        "code/background/normal",
        "code/background/sensitive",
        "code/interactive/normal",
        "code/interactive/sensitive",
    ]
    assert diff["changed_cells"] == 5


def test_diff_tables__same_table__empty() -> None:
    # Given two copies of the demo table
    # When they are diffed
    diff = diff_tables(_seed_dimensions(), demo_table(), _seed_dimensions(), demo_table())

    # Then nothing is reported
    assert diff == {"dimensions": {}, "cells": [], "changed_cells": 0}
