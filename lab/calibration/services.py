"""Applying a calibration: the chosen θs written into the draft as one normal draft edit, and
the backtest of the result started, to be read before publishing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from controlplane.exceptions import ApplicationError, ValidationFailed
from routing_policies.cell_schema import DIMENSIONS, CellKey, cell_key_label
from routing_policies.models import Fleet, PolicyCell, PolicyVersion
from routing_policies.selectors import draft_get
from routing_policies.services import (
    Actor,
    policy_draft_override_set,
    policy_draft_update_cells,
)

from ..backtests.models import Backtest
from ..backtests.services import backtest_start
from ..schemas import cell_key
from ..segments import lab_segment

__all__ = ["calibration_apply", "calibration_apply_cells"]

logger = logging.getLogger(__name__)


@transaction.atomic
def calibration_apply(
    *,
    actor: Actor,
    fleet: Fleet,
    revision: int,
    thresholds: Sequence[tuple[CellKey, float]],
    segment: str | None = None,
) -> tuple[PolicyVersion, Backtest | None]:
    """Write θ per cell into the draft at `revision` (a stale revision is refused with 409):
    the draft-edit service validates, locks, bumps the revision and records the audit entry;
    with `segment`, into the draft's override for it (its other fields kept), with the
    override service. Then start the backtest of the new revision over the last 24 h (of the
    segment, if one) (run after the commit); None when it cannot start (e.g. no stable
    version yet), which does not undo the edit."""
    if not thresholds:
        raise ValidationFailed(
            "Name at least one cell and its θ.",
            details=[{"field": "cells", "message": "is empty"}],
        )
    _cells_exist(fleet, [key for key, _ in thresholds])
    if segment is not None:
        lab_segment(fleet=fleet, name=segment)
        draft = _override_thresholds(actor, fleet, revision, segment, thresholds)
    else:
        edits: list[dict[str, Any]] = [
            {**dict(zip(DIMENSIONS, key, strict=True)), "values": {"threshold": threshold}}
            for key, threshold in thresholds
        ]
        draft = policy_draft_update_cells(actor=actor, fleet=fleet, revision=revision, edits=edits)
    backtest: Backtest | None = None
    try:
        with transaction.atomic():
            backtest, _ = backtest_start(
                actor=actor,
                fleet=fleet,
                version="draft",
                revision=draft.revision,
                segment=segment,
            )
    except ApplicationError as exc:
        logger.info("calibration.backtest_not_started fleet=%s reason=%s", fleet.slug, exc.message)
    logger.info(
        "calibration.applied fleet=%s segment=%s cells=%d revision=%d backtest=%s",
        fleet.slug,
        segment,
        len(thresholds),
        draft.revision,
        backtest.pk if backtest else None,
    )
    return draft, backtest


def _override_thresholds(
    actor: Actor,
    fleet: Fleet,
    revision: int,
    segment: str,
    thresholds: Sequence[tuple[CellKey, float]],
) -> PolicyVersion:
    """The θs written into the draft's override for `segment`: its cells as they are, each
    calibrated cell's θ set (a cell it did not override yet added with its θ alone)."""
    draft = draft_get(fleet=fleet)
    current = next((o for o in (draft.overrides if draft else []) if o["segment"] == segment), None)
    cells = {label: dict(fields) for label, fields in (current or {}).get("cells", {}).items()}
    for key, threshold in thresholds:
        cells.setdefault(cell_key_label(key), {})["threshold"] = threshold
    return policy_draft_override_set(
        actor=actor, fleet=fleet, revision=revision, segment=segment, cells=cells
    )


def _cells_exist(fleet: Fleet, keys: Sequence[CellKey]) -> None:
    """A well-formed cell the draft does not have is refused (400 naming it), as a calibration
    naming a cell its table lacks is; nothing is written."""
    draft = draft_get(fleet=fleet)
    if draft is None:
        return  # the draft-edit service refuses it, saying there is no draft
    known = set(PolicyCell.objects.filter(version=draft).values_list(*DIMENSIONS))
    for index, key in enumerate(keys):
        if tuple(key) not in known:
            raise ValidationFailed(
                f"The draft has no cell {'/'.join(key)}.",
                details=[{"field": f"cells[{index}]", "message": "no such cell in the draft"}],
            )


def calibration_apply_cells(
    *, cells: Sequence[dict[str, Any]], **arguments: Any
) -> tuple[PolicyVersion, Backtest | None]:
    """`calibration_apply` (its other `arguments` as it takes them) of checked cells, each its
    dimension values and `threshold`: the API's `cells`, the page's ticked `theta`."""
    thresholds = [(cell_key(cell), cell["threshold"]) for cell in cells]
    return calibration_apply(thresholds=thresholds, **arguments)
