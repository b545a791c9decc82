"""Overrides by segment on the device: the policy store resolves the document's overrides with
the device's attributes (edge_sdk.overrides), the router routes with the resolved cell, devices
in different segments share nothing wrongly, and a malformed overrides section is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge_sdk import PolicyDocumentError, PolicyStore, Router

from .sdk_helpers import policy_document, readings, task

NPU = {"attribute": "accelerator", "equals": "npu"}
TEXT = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}


def _with_overrides(**changes: Any) -> dict[str, Any]:
    document = policy_document(3)
    document["overrides"] = [
        {"segment": "npu", "rule": NPU, "cells": [{**TEXT, "threshold": 0.95, **changes}]}
    ]
    return document


def test_apply__device_in_the_segment__routes_with_the_overridden_cell() -> None:
    # Given one document, applied by an NPU device and by a device that said nothing
    npu, other = PolicyStore(attributes={"accelerator": "npu"}), PolicyStore()
    for store in (npu, other):
        store.apply(_with_overrides())

    # When each routes a text task scoring above the base θ (0.6) and below 0.95
    high = task(tokens=400, intent_conf=0.4, lm_conf=0.4)
    decisions = [Router(store).route(high, readings()) for store in (npu, other)]

    # Then the NPU device uses θ 0.95 (the override), the other 0.6 (the base); same ETag
    assert [d.base_threshold for d in decisions] == [0.95, 0.6]
    assert npu.etag == other.etag
    assert npu.cells[("text", "interactive", "normal")].weight_lm == 0.3  # not overridden


def test_apply__nested_group_override__merged_field_by_field() -> None:
    store = PolicyStore(attributes={"accelerator": "npu"})
    store.apply(_with_overrides(network={"rtt_high_ms": 50}))
    cell = store.cells[("text", "interactive", "normal")]
    assert (cell.rtt_high_ms, cell.bandwidth_low_kbps) == (50, 500)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ("npu", "'overrides' must be a list"),
        ([{"rule": NPU, "cells": []}], "naming its segment"),
        ([{"segment": "npu", "rule": {"attribute": "colour", "equals": "x"}, "cells": []}], "rule"),
        ([{"segment": "npu", "rule": NPU, "cells": [{"threshold": 0.9}]}], "its key"),
        ([{"segment": "npu", "rule": NPU, "cells": [{**TEXT, "threshold": "high"}]}], "threshold"),
    ],
)
def test_apply__malformed_overrides__refused_and_the_current_policy_stays(
    overrides: Any, says: str
) -> None:
    store = PolicyStore(attributes={"accelerator": "npu"})
    store.apply(policy_document(1))
    document = {**policy_document(2), "overrides": overrides}
    with pytest.raises(PolicyDocumentError, match=says):
        store.apply(document)
    assert store.version == 1


def test_apply__bad_override_field__refused_only_by_devices_it_reaches() -> None:
    # A field the device would run broken is refused by the devices of the segment only:
    # the others never resolve it (they run the base cells, which are fine).
    document = _with_overrides(threshold="high")
    with pytest.raises(PolicyDocumentError):
        PolicyStore(attributes={"accelerator": "npu"}).apply(document)
    PolicyStore(attributes={"accelerator": "cpu"}).apply(document)


def test_load__stored_document__resolved_again_with_the_attributes(tmp_path: Path) -> None:
    PolicyStore(tmp_path, attributes={"accelerator": "npu"}).apply(_with_overrides())
    again = PolicyStore(tmp_path, attributes={"accelerator": "npu"})
    assert again.load()
    assert again.cells[("text", "interactive", "normal")].threshold == 0.95


def test_apply__same_version_other_segments__tables_not_shared() -> None:
    npu, cpu = PolicyStore(attributes={"accelerator": "npu"}), PolicyStore()
    npu.apply(_with_overrides())
    cpu.apply(_with_overrides())
    assert npu.current is not None
    assert cpu.current is not None
    assert npu.current.table is not cpu.current.table
    twin = PolicyStore(attributes={"accelerator": "npu"})
    twin.apply(_with_overrides())
    assert twin.current is not None
    assert twin.current.table is npu.current.table


def test_transports__protobuf_and_delta__carry_the_overrides_unchanged() -> None:
    # Given a version with overrides, and the version before it without
    from edge_sdk.delta import apply_delta, make_delta
    from edge_sdk.wire.codec import document_from_protobuf, document_to_protobuf

    before, after = policy_document(2), _with_overrides()

    # When it goes as protobuf, and as a delta from the version before
    decoded = document_from_protobuf(document_to_protobuf(after))
    delta = make_delta(before, after)
    assert delta is not None
    patched = apply_delta(before, delta)

    # Then the device resolves the same table either way
    for document in (decoded, patched):
        assert document["overrides"] == after["overrides"]
        store = PolicyStore(attributes={"accelerator": "npu"})
        store.apply(document)
        assert store.cells[("text", "interactive", "normal")].threshold == 0.95
