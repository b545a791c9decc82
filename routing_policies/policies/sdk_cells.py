"""A version's table as the decision function reads it, and the publish-time privacy check.

The lab (lab/) replays and explains decisions with these `edge_sdk.decision.Cell`s;
publishing asks the same decision function whether a cell could send a sensitive task's data
off the device where the cell forbids it (docs/lab.md, "Backtest").
"""

import math
from typing import Final

from edge_sdk.decision import (
    Cell,
    CellDocumentError,
    DeviceState,
    TaskSignals,
    decide,
    left_device_by_route,
    privacy_violation,
)

from ..cell_schema import CellKey, cell_key_label
from ..documents import Table, cell_document
from ..validation import Problem

__all__ = [
    "privacy_problems",
    "sends_sensitive_data_off_device",
    "shadow_refine_rates",
    "table_cells",
]

# The task most likely to go to the cloud, on the best network: if the decision keeps even
# this one on the device, it keeps every task there.
_CLOUD_BOUND_TASK: Final = TaskSignals(tokens=10**7, intent_conf=0.0, lm_conf=0.0)
_BEST_NETWORK: Final = DeviceState(
    rtt_ms=0.0,
    bandwidth_kbps=math.inf,
    device_load=0.0,
    online=True,
    cloud_infer_ms=0.0,
    cloud_pressure=-1.0,
)


def table_cells(table: Table) -> dict[CellKey, Cell]:
    """Every cell of a table as a decision `Cell`, keyed like the table."""
    return {key: Cell.from_document(cell_document(key, values)) for key, values in table.items()}


def shadow_refine_rates(table: Table) -> dict[CellKey, float]:
    """Each cell's `shadow_refine_rate` as devices read it: the share of its device-answered
    tasks the cloud also refines in the background (0 where the cell forbids uploads, as the
    SDK treats it, whatever the table says)."""
    rates = {}
    for key, values in table.items():
        rate = float(values.get("shadow_refine_rate") or 0.0)
        rates[key] = rate if values.get("upload.allowed") else 0.0
    return rates


def sends_sensitive_data_off_device(cell: Cell) -> bool:
    """Whether the decision can send a task of this cell off the device where the cell forbids
    it (PROTOCOL.md extensions: a privacy violation), judged by `decide` on the most
    cloud-bound task; uploads are de-identified exactly when the cell asks."""
    route = decide(cell, _CLOUD_BOUND_TASK, _BEST_NETWORK).route
    return privacy_violation(
        privacy_tier=cell.privacy_tier,
        upload_allowed=cell.upload_allowed,
        upload_deidentify=cell.upload_deidentify,
        left_device=left_device_by_route(route, "none", False),
        deidentified=cell.upload_deidentify,
    )


def privacy_problems(table: Table) -> list[Problem]:
    """One problem per cell whose decision would send sensitive data off the device (a cell
    the decision cannot read is left to the table's validation, which names it)."""
    problems = []
    for key, values in table.items():
        if values.get("shadow_refine_rate") and values.get("upload.allowed") is False:
            # Validation names it too; publishing refuses it even for a table saved before.
            problems.append(
                Problem(
                    "shadow_refine_rate",
                    "a shadow refine would send this cell's drafts to the cloud, which its "
                    "upload setting forbids; set it to 0 or allow uploads",
                    cell_key_label(key),
                )
            )
        try:
            cell = Cell.from_document(cell_document(key, values))
        except (CellDocumentError, KeyError):
            continue
        if sends_sensitive_data_off_device(cell):
            problems.append(
                Problem(
                    "privacy",
                    f"{cell.mode} would send this sensitive cell's data to the cloud, which "
                    "its upload setting forbids; keep it on the device or allow de-identified "
                    "uploads",
                    cell_key_label(key),
                )
            )
    return problems
