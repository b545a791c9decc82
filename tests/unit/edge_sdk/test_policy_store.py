"""PolicyStore: a whole document checked before it replaces the current one, kept on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edge_sdk import PolicyDocumentError, PolicyStore

from .sdk_helpers import policy_document, task


def test_apply__good_document__indexes_every_cell_and_keeps_version_etag_rollout() -> None:
    store = PolicyStore()

    store.apply(policy_document(7), rollout={"id": 3, "stage": 25})

    assert (store.version, store.etag, store.rollout) == (7, '"v7-unit"', {"id": 3, "stage": 25})
    assert len(store.cells) == 12
    cell = store.cell(task())
    assert cell is not None
    assert (cell.task_type, cell.threshold) == ("text", 0.6)


def _broken(change: str) -> dict[str, Any]:
    document = policy_document(2)
    if change == "no_version":
        del document["version"]
    elif change == "version_zero":
        document["version"] = 0
    elif change == "version_bool":
        document["version"] = True
    elif change == "no_cells":
        document["cells"] = []
    elif change == "cell_not_object":
        document["cells"][3] = "cell"
    elif change == "bad_mode":
        document["cells"][3]["mode"] = "sometimes"
    elif change == "repeated_cell":
        document["cells"][3] = dict(document["cells"][2])
    elif change == "etag_number":
        document["etag"] = 7
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no_version", "version"),
        ("version_zero", "version"),
        ("version_bool", "version"),
        ("no_cells", "cells"),
        ("cell_not_object", r"cells\[3\]"),
        ("bad_mode", r"cells\[3\].*mode"),
        ("repeated_cell", "repeats"),
        ("etag_number", "etag"),
    ],
)
def test_apply__bad_document__refused_naming_why_and_current_policy_stays(
    change: str, message: str, tmp_path: Path
) -> None:
    store = PolicyStore(tmp_path)
    store.apply(policy_document(1))

    with pytest.raises(PolicyDocumentError, match=message):
        store.apply(_broken(change))

    assert store.version == 1
    assert json.loads((tmp_path / "policy.json").read_text())["document"]["version"] == 1


def test_apply__rollout_not_an_object__refused() -> None:
    with pytest.raises(PolicyDocumentError, match="rollout"):
        PolicyStore().apply(policy_document(), rollout=[3, 5])  # type: ignore[arg-type]


def test_load__stored_policy__routes_at_once_after_a_restart(tmp_path: Path) -> None:
    PolicyStore(tmp_path).apply(policy_document(4), rollout={"id": 1, "stage": 5})

    again = PolicyStore(tmp_path)

    assert again.load()
    assert (again.version, again.rollout, again.etag) == (4, {"id": 1, "stage": 5}, '"v4-unit"')
    assert again.cell(task()) is not None


def test_apply__etag_only_in_the_http_header__kept_for_if_none_match() -> None:
    document = policy_document(5)
    del document["etag"]
    store = PolicyStore()

    store.apply(document, etag='"v5-header"')

    assert store.etag == '"v5-header"'


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"document": {"version": 1}}', b"[]"])
def test_load__missing_or_damaged_file__no_policy_and_no_crash(
    content: bytes, tmp_path: Path
) -> None:
    (tmp_path / "policy.json").write_bytes(content)
    store = PolicyStore(tmp_path)

    assert not store.load()
    assert store.version is None
    assert store.cells == {}


def test_load__no_state_dir__nothing_to_load() -> None:
    assert not PolicyStore().load()


def test_apply__writes_atomically__no_temporary_file_left(tmp_path: Path) -> None:
    store = PolicyStore(tmp_path)
    for version in (1, 2, 3):
        store.apply(policy_document(version))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.json"]
    assert (tmp_path / "policy.json").stat().st_mode & 0o077 == 0


def test_apply__each_apply__calls_on_change_and_bumps_the_generation() -> None:
    store = PolicyStore()
    calls: list[int] = []
    store.on_change.append(lambda: calls.append(store.generation))

    store.apply(policy_document(1))
    store.apply(policy_document(2))

    assert calls == [1, 2]


def test_apply__same_version_on_many_devices__one_shared_table() -> None:
    first, second = PolicyStore(), PolicyStore()

    first.apply(policy_document(6))
    second.apply(json.loads(json.dumps(policy_document(6))))  # parsed from its own frame

    assert first.current is not None
    assert second.current is not None
    assert first.current.table is second.current.table


def test_apply__same_version_and_etag_but_other_content__not_shared() -> None:
    first, second = PolicyStore(), PolicyStore()
    first.apply(policy_document(8))

    second.apply(policy_document(8, **{"text/interactive/normal": {"threshold": 0.9}}))

    assert first.cell(task()).threshold == 0.6  # type: ignore[union-attr]
    assert second.cell(task()).threshold == 0.9  # type: ignore[union-attr]
