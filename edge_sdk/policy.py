"""The device's current policy: parsed once, indexed by cell, kept on disk.

A policy document (PROTOCOL.md) arrives over the socket or the polling path; it is checked
in full before it replaces the current one (a bad document never half-applies), indexed by
cell key for the router, and written atomically to `state_dir/policy.json`, so a device that
starts without a network routes at once with its last known good policy.

A published version never changes and its ETag names its content, so the parsed table of a
version is shared by every device of the process that runs it (a simulator runs thousands):
the document, the cells and the router's plans are held once per (fleet, version, ETag).
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from edge_sdk.decision import Cell, CellDocumentError
from edge_sdk.overrides import matching_overrides, resolve_cells
from edge_sdk.segments import RuleProblem, rule_check
from edge_sdk.storage import atomic_write, read_bytes

__all__ = ["CellKey", "Policy", "PolicyDocumentError", "PolicyStore", "PolicyTable", "parse_policy"]

logger = logging.getLogger(__name__)

CellKey = tuple[str, str, str]  # (task_type, latency_budget, privacy_tier)
POLICY_FILE = "policy.json"
_DIMENSIONS = ("task_type", "latency_budget", "privacy_tier")


class PolicyDocumentError(ValueError):
    """A policy document that cannot be applied (the current policy stays)."""


_MAX_PLAN_SETS: Final = 8  # cloud-pressure values whose router plans a table keeps


@dataclass(eq=False, slots=True, weakref_slot=True)
class PolicyTable:
    """The parsed, immutable part of a version, shared by the devices that run it."""

    document: Mapping[str, Any]
    cells: Mapping[CellKey, Cell]
    # Each cell's `shadow_refine_rate` (PROTOCOL.md extensions), 0 where the cell forbids
    # uploads; read here, not by `Cell`, because the decision never reads it.
    shadow_rates: Mapping[CellKey, float] = field(default_factory=dict)
    # Router plans per cloud-pressure value (edge_sdk.router fills it; bounded).
    plans: dict[float, Any] = field(default_factory=dict)

    def plans_for(self, pressure: float, build: Callable[[], Any]) -> Any:
        """The plans under `pressure`, built once per table and pressure."""
        plans = self.plans.get(pressure)
        if plans is None:
            if len(self.plans) >= _MAX_PLAN_SETS:
                self.plans.clear()
            plans = self.plans[pressure] = build()
        return plans


# (fleet, version, etag, the overrides a device matches) -> table, while any device holds it.
_tables: weakref.WeakValueDictionary[tuple[Any, int, str, tuple[int, ...]], PolicyTable] = (
    weakref.WeakValueDictionary()
)


@dataclass(frozen=True, slots=True)
class Policy:
    """One applied policy version (with the rollout stage it came with)."""

    version: int
    etag: str | None
    rollout: Mapping[str, Any] | None
    table: PolicyTable

    @property
    def document(self) -> Mapping[str, Any]:
        """The policy document as received."""
        return self.table.document

    @property
    def cells(self) -> Mapping[CellKey, Cell]:
        """The cells by (task_type, latency_budget, privacy_tier)."""
        return self.table.cells


def parse_policy(
    document: Mapping[str, Any],
    *,
    rollout: Mapping[str, Any] | None = None,
    etag: str | None = None,
    attributes: Mapping[str, object] | None = None,
) -> Policy:
    """Check a whole policy document and index its cells; PolicyDocumentError says why not.

    `etag` (from an HTTP header) is used when the document carries none. The cells are those a
    device with these `attributes` runs (edge_sdk.overrides: the document's overrides by
    segment resolved; without attributes every attribute is unknown and no segment matches).
    """
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise PolicyDocumentError("policy field 'version' must be a whole number >= 1")
    if rollout is not None and not isinstance(rollout, Mapping):
        raise PolicyDocumentError("'rollout' must be an object or null")
    own_etag = document.get("etag")
    if own_etag is not None and not isinstance(own_etag, str):
        raise PolicyDocumentError("policy field 'etag' must be a string")
    etag = own_etag if own_etag is not None else etag
    _check_overrides(document)
    matched = matching_overrides(document, attributes or {})
    key = (document.get("fleet"), version, etag, matched) if etag else None
    table = _tables.get(key) if key is not None else None
    # Equal content is checked, not assumed from the ETag: a server that reused a version
    # number for other content must not get one device routing by another's table.
    if table is None or table.document != document:
        raw_cells = document.get("cells")
        if not isinstance(raw_cells, list) or not raw_cells:
            raise PolicyDocumentError("policy field 'cells' must be a non-empty list")
        if not all(isinstance(raw, Mapping) for raw in raw_cells):
            index = next(i for i, raw in enumerate(raw_cells) if not isinstance(raw, Mapping))
            raise PolicyDocumentError(f"cells[{index}] must be an object")
        resolved = resolve_cells(document, attributes or {}, matched=matched)
        cells = _parse_cells(resolved)
        table = PolicyTable(
            document=document, cells=cells, shadow_rates=_shadow_rates(resolved, cells)
        )
        if key is not None:
            _tables[key] = table
    return Policy(version=version, etag=etag, rollout=rollout, table=table)


MAX_OVERRIDES: Final = 64  # the server sends at most 32


def _check_overrides(document: Mapping[str, Any]) -> None:
    """The document's `overrides` (PROTOCOL.md extensions), if any, well formed: a list of
    objects each with a segment's name, its rule (checked as edge_sdk.segments checks one) and
    a list of cells each naming its key; the fields are checked on the resolved cells."""
    overrides = document.get("overrides")
    if overrides is None:
        return
    if not isinstance(overrides, list) or len(overrides) > MAX_OVERRIDES:
        raise PolicyDocumentError(f"'overrides' must be a list of at most {MAX_OVERRIDES}")
    for index, override in enumerate(overrides):
        place = f"overrides[{index}]"
        if not isinstance(override, Mapping) or not isinstance(override.get("segment"), str):
            raise PolicyDocumentError(f"{place} must be an object naming its segment")
        try:
            rule_check(override.get("rule"))
        except RuleProblem as problem:
            raise PolicyDocumentError(f"{place}.rule: {problem}") from None
        cells = override.get("cells")
        if not isinstance(cells, list) or not all(
            isinstance(cell, Mapping) and all(isinstance(cell.get(k), str) for k in _DIMENSIONS)
            for cell in cells
        ):
            raise PolicyDocumentError(f"{place}.cells must be a list of cells, each with its key")


def _parse_cells(raw_cells: list[dict[str, Any]]) -> dict[CellKey, Cell]:
    cells: dict[CellKey, Cell] = {}
    for index, raw in enumerate(raw_cells):
        try:
            cell = Cell.from_document(raw)
        except CellDocumentError as error:
            raise PolicyDocumentError(f"cells[{index}]: {error}") from None
        key = (cell.task_type, cell.latency_budget, cell.privacy_tier)
        if key in cells:
            raise PolicyDocumentError(f"cells[{index}] repeats cell {'/'.join(key)}")
        cells[key] = cell
    return cells


MAX_SHADOW_REFINE_RATE: Final = 1.0  # the server sends at most 0.05; more is not a share


def _shadow_rates(
    raw_cells: list[dict[str, Any]], cells: Mapping[CellKey, Cell]
) -> dict[CellKey, float]:
    """`shadow_refine_rate` of each cell that has one above 0 (absent: 0, as old servers send).

    A value that is not a number in [0, 1] makes the document unusable, like any bad field;
    a rate on a cell that forbids uploads is read as 0: a shadow refine would send the task's
    draft to the cloud (the server refuses such a cell; the device does not trust it to).
    """
    rates: dict[CellKey, float] = {}
    for index, raw in enumerate(raw_cells):
        rate = raw.get("shadow_refine_rate", 0.0)
        if (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not 0.0 <= rate <= MAX_SHADOW_REFINE_RATE  # NaN fails this too
        ):
            raise PolicyDocumentError(
                f"cells[{index}]: cell field 'shadow_refine_rate' must be a number in [0, 1], "
                f"got {rate!r}"
            )
        key = (raw["task_type"], raw["latency_budget"], raw["privacy_tier"])
        if rate > 0 and cells[key].upload_allowed:
            rates[key] = float(rate)
    return rates


class PolicyStore:
    """The policy the device routes with now (None until one is applied or loaded)."""

    __slots__ = (
        "_path",
        "_write_lock",
        "attributes",
        "cells",
        "current",
        "generation",
        "on_change",
        "shadow_rates",
    )

    def __init__(
        self, state_dir: Path | None = None, *, attributes: Mapping[str, object] | None = None
    ) -> None:
        self._path = state_dir / POLICY_FILE if state_dir is not None else None
        # What the device is (edge_sdk.segments.device_attributes): the document's overrides
        # by segment are resolved with them into the cells the router reads.
        self.attributes: Mapping[str, object] = dict(attributes or {})
        self._write_lock = threading.Lock()
        self.current: Policy | None = None
        # Read by the router on every decision: a plain dict, swapped whole on apply.
        self.cells: Mapping[CellKey, Cell] = {}
        self.shadow_rates: Mapping[CellKey, float] = {}  # cells with a rate above 0 only
        # Bumped on every apply, so caches keyed on it never serve another version's answer.
        self.generation = 0
        # Called after every apply or load (the router drops its per-cell plans).
        self.on_change: list[Callable[[], None]] = []

    @property
    def version(self) -> int | None:
        """The applied version's number."""
        return self.current.version if self.current is not None else None

    @property
    def document(self) -> Mapping[str, Any] | None:
        """The applied policy document as received."""
        return self.current.document if self.current is not None else None

    @property
    def rollout(self) -> Mapping[str, Any] | None:
        """`{"id": …, "stage": …}` when the version came with a rollout, else None."""
        return self.current.rollout if self.current is not None else None

    @property
    def etag(self) -> str | None:
        """The applied version's ETag (sent as If-None-Match when polling)."""
        return self.current.etag if self.current is not None else None

    def cell(self, task: Any) -> Cell | None:
        """The cell of a task (anything with task_type, latency_budget, privacy_tier)."""
        return self.cells.get((task.task_type, task.latency_budget, task.privacy_tier))

    def shadow_refine_rate(self, task: Any) -> float:
        """The `shadow_refine_rate` of a task's cell (0 without one, or where uploads are
        forbidden)."""
        return self.shadow_rates.get((task.task_type, task.latency_budget, task.privacy_tier), 0.0)

    def apply(
        self,
        document: Mapping[str, Any],
        *,
        rollout: Mapping[str, Any] | None = None,
        etag: str | None = None,
        save: bool = True,
    ) -> Policy:
        """Check, apply and (unless `save` is False) persist a document.

        On PolicyDocumentError nothing changes. With `save=False` the caller calls `save()`
        later, e.g. on a worker thread: a device of a large simulated fleet must not stall the
        event loop on an fsync.
        """
        policy = parse_policy(document, rollout=rollout, etag=etag, attributes=self.attributes)
        self._set(policy)
        if save:
            self.save()
        return policy

    def load(self) -> bool:
        """Apply the policy stored in state_dir, if any; False when there is none usable."""
        if self._path is None:
            return False
        raw = read_bytes(self._path)
        if raw is None:
            return False
        try:
            stored = json.loads(raw)
            policy = parse_policy(
                stored["document"],
                rollout=stored.get("rollout"),
                etag=stored.get("etag"),
                attributes=self.attributes,
            )
        except (ValueError, KeyError, TypeError) as error:
            logger.warning("policy.stored_unusable path=%s error=%s", self._path, error)
            return False
        self._set(policy)
        return True

    def _set(self, policy: Policy) -> None:
        self.current = policy
        self.cells = policy.cells
        self.shadow_rates = policy.table.shadow_rates
        self.generation += 1
        for callback in self.on_change:
            callback()

    def save(self) -> None:
        """Write the current policy to state_dir; thread-safe, the newest applied one wins."""
        if self._path is None:
            return
        with self._write_lock:
            policy = self.current
            if policy is None:
                return
            payload = {"document": policy.document, "rollout": policy.rollout, "etag": policy.etag}
            try:
                atomic_write(self._path, json.dumps(payload, separators=(",", ":")).encode())
            except OSError as error:
                # Routing goes on with the applied policy; only an offline start loses it.
                logger.warning("policy.save_failed path=%s error=%s", self._path, error)
