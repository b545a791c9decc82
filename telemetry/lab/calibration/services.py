"""Applying a calibration: the chosen θs written into the draft as one normal draft edit."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from controlplane.exceptions import ValidationFailed
from routing_policies.cell_schema import DIMENSIONS, CellKey
from routing_policies.models import Fleet, PolicyVersion
from routing_policies.services import Actor, policy_draft_update_cells

__all__ = ["calibration_apply"]

logger = logging.getLogger(__name__)


def calibration_apply(
    *,
    actor: Actor,
    fleet: Fleet,
    revision: int,
    thresholds: Sequence[tuple[CellKey, float]],
) -> PolicyVersion:
    """Write θ per cell into the draft at `revision` (a stale revision is refused with 409):
    the draft-edit service validates, locks, bumps the revision and records the audit entry."""
    if not thresholds:
        raise ValidationFailed(
            "Name at least one cell and its θ.",
            details=[{"field": "cells", "message": "is empty"}],
        )
    edits: list[dict[str, Any]] = [
        {**dict(zip(DIMENSIONS, key, strict=True)), "values": {"threshold": threshold}}
        for key, threshold in thresholds
    ]
    draft = policy_draft_update_cells(actor=actor, fleet=fleet, revision=revision, edits=edits)
    logger.info(
        "calibration.applied fleet=%s cells=%d revision=%d",
        fleet.slug,
        len(edits),
        draft.revision,
    )
    return draft
