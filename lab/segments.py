"""Backtests and calibration per segment (docs/lab.md, "Per segment"): which events are a
segment's, and which table a device of the segment runs.

**Membership is the device's current one**: a segment's events are those of the fleet's
devices (revoked ones too: their events stay theirs) whose attributes, as the registry holds
them now, the segment's rule matches, evaluated with the one evaluation
(`edge_sdk.segments.rule_matches`, through `Device.objects.in_scope`, once per distinct set of
attributes) and handed to the event query as a sub-select. Events carry no attributes, so an
event of a device the registry does not know is in no segment.

**The table** a device of the segment runs in a version is the version's document resolved by
the SDK's own resolution (`edge_sdk.overrides.resolve_cells`) with the segment's override as
the one it matches: the base cells, and the segment's fields over them where it overrides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from django.core.exceptions import EmptyResultSet
from django.db.models import Count

from controlplane.exceptions import Conflict, ValidationFailed
from edge_sdk.overrides import resolve_cells
from edge_sdk.segments import device_attributes
from routing_policies.cell_schema import cell_key_label, document_cell
from routing_policies.documents import Table
from routing_policies.models import Device, Fleet, PolicyVersion, Segment
from routing_policies.selectors import version_document

__all__ = [
    "MAX_SEGMENT_NAME",
    "LabSegment",
    "lab_segment",
    "segment_devices",
    "segment_members_sql",
    "segment_names",
    "segment_other_tables",
    "segment_table",
]

# A segment's name as the lab takes it: the model's own bound (routing_policies.segments).
MAX_SEGMENT_NAME: Final = Segment._meta.get_field("name").max_length or 64


@dataclass(frozen=True, slots=True, kw_only=True)
class LabSegment:
    """A segment a backtest or a calibration is scoped to: its name, its rule as read, and
    how many of the fleet's devices it matched then."""

    name: str
    rule: dict[str, Any]
    devices: int
    id: int  # the segment's id: its rollup rows' key (telemetry.rollups, `segment`)

    def out(self) -> dict[str, Any]:
        """As results show it."""
        return {"name": self.name, "rule": self.rule, "devices": self.devices}


def lab_segment(*, fleet: Fleet, name: str, field: str = "segment") -> LabSegment:
    """The fleet's segment `name` with its rule now. A name the fleet has not (another
    fleet's included) is a 400 naming `field`; a segment no device of the fleet is in, a 409
    naming it (its figures would be of no event)."""
    found = Segment.objects.filter(fleet=fleet, name=name).values_list("pk", "rule").first()
    if found is None:
        raise ValidationFailed(
            f"{field}: fleet {fleet.slug!r} has no segment {name!r}.",
            details=[{"field": field, "message": f"no segment {name!r} in this fleet"}],
        )
    pk, rule = found
    devices = segment_devices(fleet_id=fleet.pk, rule=rule)
    if not devices:
        raise Conflict(
            f"{field}: segment {name!r} matches no device of fleet {fleet.slug!r}, so no "
            "event is of it.",
            code="segment_matches_none",
            details=[{"field": field, "message": "matches no device of the fleet"}],
        )
    return LabSegment(name=name, rule=rule, devices=devices, id=pk)


def segment_names(*, fleet: Fleet) -> list[str]:
    """The fleet's segments' names, by name (what the lab's pages offer)."""
    return list(Segment.objects.filter(fleet=fleet).order_by("name").values_list("name", flat=True))


def _members(fleet_id: int, rule: dict[str, Any]) -> Any:
    return Device.objects.filter(fleet_id=fleet_id).in_scope(rule)


def segment_devices(*, fleet_id: int, rule: dict[str, Any]) -> int:
    """How many of the fleet's devices (revoked ones too) the rule matches now."""
    return int(_members(fleet_id, rule).count())


def segment_members_sql(
    *, fleet_id: int, rule: dict[str, Any]
) -> tuple[str, tuple[Any, ...]] | None:
    """A sub-select of the `device_id`s the rule matches now, with its parameters; None when
    it matches no device (nothing to select)."""
    query = _members(fleet_id, rule).values("device_id").order_by().query
    try:
        sql, params = query.sql_with_params()
    except EmptyResultSet:
        return None
    return sql, tuple(params)


def segment_table(*, version: PolicyVersion, table: Table, segment: str) -> tuple[Table, list[str]]:
    """The table a device of `segment` runs in `version` (`table` is its base table) and the
    labels of the cells the segment's override changes; the base table, and none, when the
    version has no override for it."""
    overrides = version.overrides or []
    index = next((i for i, o in enumerate(overrides) if o.get("segment") == segment), None)
    if index is None:
        return table, []
    document = version_document(version=version)
    resolved: Table = {}
    for cell in resolve_cells(document, {}, matched=(index,)):
        key, values = document_cell(cell)
        resolved[key] = values
    changed = [cell_key_label(key) for key in resolved if resolved[key] != table.get(key)]
    return resolved, changed


def segment_other_tables(
    *, fleet_id: int, rule: dict[str, Any], version: PolicyVersion, segment: str
) -> int:
    """How many of the segment's devices resolve another table of `version` than the one
    `segment_table` gives (they are also in a segment whose override comes first for a cell):
    counted per distinct set of attributes, with the SDK's resolution."""
    document = version_document(version=version)
    if not document.get("overrides"):
        return 0
    index = next(
        (i for i, o in enumerate(document["overrides"]) if o.get("segment") == segment), None
    )
    replayed = resolve_cells(document, {}, matched=() if index is None else (index,))
    groups = (
        _members(fleet_id, rule)
        .values("platform", "model", "attributes")
        .annotate(devices=Count("id"))
        .order_by()
    )
    other = 0
    for group in groups:
        attributes = device_attributes(
            platform=group["platform"], model=group["model"], reported=group["attributes"]
        )
        if resolve_cells(document, attributes) != replayed:
            other += group["devices"]
    return other
