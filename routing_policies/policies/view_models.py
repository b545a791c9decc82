"""What the policy editor pages show, built from the selectors' results: the latency–privacy
grid with its marks, the edit panel, diff rows and audit rows. No database access but through
`selectors`; the views in `views` render these."""

import json
from collections.abc import Iterable
from typing import Any

from django.urls import reverse
from rest_framework import serializers

from ..cell_schema import CELL_FIELDS, FIELDS_BY_PATH, MODES, WEIGHT_PATHS, cell_key_label
from ..documents import Table
from . import selectors
from .forms import FIELD_GROUPS, CellEdit, input_name, range_hint
from .models import AuditEntry, Fleet, PolicyVersion

MODE_DESCRIPTIONS = {
    "device_only": "always on the device",
    "cloud_only": "always in the cloud",
    "auto": "score vs θ decides",
    "draft_refine": "device drafts, cloud refines",
}

# Modes that route without scoring the task: θ is stored but does nothing there.
PINNED_MODES = ("device_only", "cloud_only")


def display_value(value: Any) -> str:
    """A value as people read it in grids, diffs and the audit log."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(display_value(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {display_value(v)}" for k, v in value.items())
    return str(value)


def field_label(path: str) -> str:
    """`Threshold θ` for `threshold`; `Latency budget (ms)`; other names as they are."""
    spec = FIELDS_BY_PATH.get(path)
    if spec is None:
        return {"weights": "Weights (sum)", "cell": "Cell", "note": "Release note"}.get(path, path)
    return f"{spec.label} ({spec.unit})" if spec.unit else spec.label


def version_ref(version: PolicyVersion) -> str:
    """How URLs and the diff name a version: its number, or `draft`."""
    return "draft" if version.is_draft else str(version.number)


def export_url(fleet: Fleet, version: PolicyVersion) -> str:
    """Where the version's document downloads from."""
    url = reverse("api-version-document", args=[fleet.slug, version_ref(version)])
    return f"{url}?download=1"


def _problem_text(problem: dict[str, Any]) -> str:
    return f"{field_label(problem.get('field', ''))}: {problem.get('message', '')}"


def grid(
    version: PolicyVersion,
    table: Table,
    *,
    problems: Iterable[dict[str, Any]] = (),
    changes: dict[str, dict[str, tuple[str, str]]] | None = None,
    added: Iterable[str] = (),
    selected: Iterable[str] = (),
    overrides: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The latency–privacy matrix: task type × latency budget down, privacy tier across. Each
    cell lists the segments that override it, in precedence order (`overrides`, stored)."""
    cell_overrides: dict[str, list[dict[str, Any]]] = {}
    for position, override in enumerate(overrides, start=1):
        for label, fields in override["cells"].items():
            cell_overrides.setdefault(label, []).append(
                {
                    "position": position,
                    "segment": override["segment"],
                    "summary": override_summary(fields),
                }
            )
    cell_problems: dict[str, list[str]] = {}
    for problem in problems:
        if problem.get("cell"):
            cell_problems.setdefault(problem["cell"], []).append(_problem_text(problem))
    changes = changes or {}
    selected_labels, added_labels = set(selected), set(added)
    dims = version.dimensions
    groups = []
    for task_type in dims["task_type"]:
        rows = []
        for budget in dims["latency_budget"]:
            cells = []
            for tier in dims["privacy_tier"]:
                key = (task_type, budget, tier)
                label = cell_key_label(key)
                values = table.get(key)
                cell_changes = changes.get(label, {})
                cells.append(
                    {
                        "label": label,
                        "tier": tier,
                        "missing": values is None,
                        "mode": values["mode"] if values else "",
                        "threshold": values["threshold"] if values else None,
                        "theta_applies": values is not None and values["mode"] not in PINNED_MODES,
                        "latency_budget_display": (
                            f"{values['latency_budget_ms']:,}" if values else ""
                        ),
                        "upload_allowed": values["upload.allowed"] if values else None,
                        "upload_deidentify": values["upload.deidentify"] if values else None,
                        "fallback": values["fallback"] if values else "",
                        "all_fields": [
                            {
                                "label": field_label(spec.path),
                                "value": display_value(values[spec.path]),
                                "changed": spec.path in cell_changes,
                            }
                            for spec in CELL_FIELDS
                        ]
                        if values
                        else [],
                        "errors": cell_problems.get(label, []),
                        "changed": bool(cell_changes),
                        "changed_paths": set(cell_changes),
                        "changes": [
                            {"field": field_label(path), "before": old, "after": new}
                            for path, (old, new) in cell_changes.items()
                        ],
                        "selected": label in selected_labels,
                        "added": label in added_labels,
                        "overrides": cell_overrides.get(label, []),
                    }
                )
            rows.append(
                {"latency_budget": budget, "row_id": f"{task_type}/{budget}", "cells": cells}
            )
        groups.append({"task_type": task_type, "rows": rows})
    return {"tiers": dims["privacy_tier"], "groups": groups}


def override_summary(fields: dict[str, Any]) -> str:
    """`θ 0.8, mode device_only`: an override's fields of one cell, short."""
    short = {"threshold": "θ"}
    return ", ".join(
        f"{short.get(path, field_label(path))} {display_value(value)}"
        for path, value in fields.items()
    )


def overrides_view(overrides: Iterable[dict[str, Any]], table: Table) -> list[dict[str, Any]]:
    """The version's overrides for the page, in precedence order: each segment (its rule as
    the version holds it), and each cell it changes with each field's value over the base's."""
    rows = []
    for position, override in enumerate(overrides, start=1):
        cells = []
        for label, fields in override["cells"].items():
            base = table.get(tuple(label.split("/")), {})
            cells.append(
                {
                    "label": label,
                    "fields": [
                        {
                            "path": path,
                            "label": field_label(path),
                            "value": display_value(value),
                            "base": display_value(base.get(path)),
                        }
                        for path, value in fields.items()
                    ],
                }
            )
        rule = override.get("rule")
        rows.append(
            {
                "position": position,
                "segment": override["segment"],
                "rule": json.dumps(rule, separators=(", ", ": ")) if rule is not None else "",
                "cells": cells,
            }
        )
    return rows


def diff_override_rows(diff: dict[str, Any]) -> list[dict[str, Any]]:
    """The diff page's overrides: a row per changed field of a segment's override."""
    rows = []
    for override in diff.get("overrides", []):
        for index, change in enumerate(override["fields"]):
            cell, _, path = change["field"].rpartition(".")
            rows.append(
                {
                    "segment": override["segment"],
                    "first": index == 0,
                    "span": len(override["fields"]),
                    "status": override["status"],
                    "cell": cell,
                    "field": {"position": "Precedence", "rule": "Rule"}.get(
                        change["field"], field_label(path)
                    ),
                    "before": display_value(change["before"]),
                    "after": display_value(change["after"]),
                }
            )
    return rows


def diff_marks(
    diff: dict[str, Any],
) -> tuple[dict[str, dict[str, tuple[str, str]]], list[str]]:
    """A version diff as grid marks: {cell: {field: (before, after)}} and the added cells."""
    changes = {
        cell["cell"]: {
            f["field"]: (display_value(f["before"]), display_value(f["after"]))
            for f in cell["fields"]
        }
        for cell in diff["cells"]
        if cell["status"] == "changed"
    }
    added = [cell["cell"] for cell in diff["cells"] if cell["status"] == "added"]
    return changes, added


def draft_changes(fleet: Fleet, draft: PolicyVersion) -> dict[str, Any] | None:
    """How the draft differs from the version it started from, for the grid and Publish."""
    base = draft.based_on.number if draft.based_on else None
    if base is None:
        return None  # the fleet's first table: nothing to compare with
    diff = selectors.version_diff(fleet=fleet, a=base, b="draft")
    changes, added = diff_marks(diff)
    count = diff["changed_cells"]
    segments = len(diff["overrides"])
    overrides = (
        f", overrides of {segments} segment{'' if segments == 1 else 's'}" if segments else ""
    )
    return {
        "base": f"v{base}",
        "changes": changes,
        "added": added,
        "count": count,
        "summary": f"{count} cell{'' if count == 1 else 's'}{overrides} changed since v{base}",
        "removed": sum(1 for cell in diff["cells"] if cell["status"] == "removed"),
        "diff_url": f"{reverse('version-diff', args=[fleet.slug])}?a={base}&b=draft",
    }


def version_running(version: PolicyVersion, running: dict[str, Any]) -> str:
    """`stable`, `candidate` or `idle`: whether devices run this published version."""
    rollout = running["rollout"]
    if version.number == running["stable"]:
        return "stable"
    if rollout and version.number == rollout["candidate"]:
        return "candidate"
    return "idle"


def legend() -> list[dict[str, str]]:
    """The modes and what each does, under the grid."""
    return [{"mode": mode, "description": MODE_DESCRIPTIONS[mode]} for mode in MODES]


def edit_fields(edit: CellEdit | None, problems: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edit panel's fieldsets, with the user's input and the messages for each field."""
    messages_by_path: dict[str, list[str]] = {}
    for problem in problems:
        path = problem.get("field", "")
        targets = WEIGHT_PATHS if path == "weights" else (path,)
        cell = f"{problem['cell']}: " if problem.get("cell") else ""
        for target in targets:
            text = f"{cell}{problem.get('message', '')}"
            bucket = messages_by_path.setdefault(target, [])
            if text not in bucket and (path != "weights" or target == WEIGHT_PATHS[-1]):
                bucket.append(text)
    raw = edit.raw if edit else {}
    groups = []
    for title, paths in FIELD_GROUPS:
        fields = []
        for path in paths:
            spec = FIELDS_BY_PATH[path]
            fields.append(
                {
                    "path": path,
                    "name": input_name(spec),
                    "id": "field-" + path.replace(".", "-"),
                    "label": spec.label,
                    "unit": spec.unit,
                    "kind": spec.kind,
                    "choices": spec.choices,
                    "hint": range_hint(spec),
                    "minimum": spec.minimum,
                    "maximum": spec.maximum,
                    "help": spec.help,
                    "value": raw.get(path, ""),
                    "errors": messages_by_path.get(path, []),
                    "invalid": path in messages_by_path,
                }
            )
        groups.append({"title": title, "fields": fields})
    return groups


def problem_list(problems: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """A refusal's problems as the pages list them: cell, field label, message."""
    return [
        {
            "cell": problem.get("cell", ""),
            "field": field_label(problem.get("field", "")),
            "message": problem.get("message", ""),
        }
        for problem in problems
    ]


def form_fields(
    serializer_class: type[serializers.Serializer[Any]],
    *,
    posted: dict[str, str],
    problems: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """A page form drawn from the API's input serializer: each field's name, label, hint, limit,
    whether it is optional, the value posted and the problems that name it."""
    problems = list(problems)
    return [
        {
            "name": name,
            "label": field.label or name,
            "help_text": field.help_text or "",
            "required": field.required,
            "max_length": getattr(field, "max_length", None),
            "long": (getattr(field, "max_length", None) or 0) > 500,
            "value": posted.get(name, ""),
            "errors": [p["message"] for p in problems if p.get("field") == name],
        }
        for name, field in serializer_class().fields.items()
    ]


def _cell_summary(values: dict[str, Any]) -> str:
    mode = values.get("mode", "?")
    return (
        f"{mode}, threshold {values.get('threshold')}, budget {values.get('latency_budget_ms')} ms"
    )


def _split_audit_field(name: str) -> tuple[str, str]:
    """`voice/interactive/normal.threshold` → (cell, field label); other names → ("", name)."""
    head, _, tail = name.partition(".")
    if tail and "/" in head:
        return head, field_label(tail)
    return "", name


def diff_rows(diff: dict[str, Any]) -> list[dict[str, Any]]:
    """The diff page's table: a row per changed field, one per added or removed cell."""
    rows = []
    for cell in diff["cells"]:
        if cell["status"] == "changed":
            for index, change in enumerate(cell["fields"]):
                rows.append(
                    {
                        "cell": cell["cell"],
                        "first": index == 0,
                        "span": len(cell["fields"]),
                        "status": "changed",
                        "field": field_label(change["field"]),
                        "before": display_value(change["before"]),
                        "after": display_value(change["after"]),
                    }
                )
        else:
            values = {
                f["field"]: f["after"] if cell["status"] == "added" else f["before"]
                for f in cell["fields"]
            }
            rows.append(
                {
                    "cell": cell["cell"],
                    "first": True,
                    "span": 1,
                    "status": cell["status"],
                    "field": "whole cell",
                    "before": "" if cell["status"] == "added" else _cell_summary(values),
                    "after": _cell_summary(values) if cell["status"] == "added" else "",
                }
            )
    return rows


def audit_rows(entries: Iterable[AuditEntry]) -> list[dict[str, Any]]:
    """Audit entries with their diffs as people read them (cell, field label, before, after)."""
    rows = []
    for entry in entries:
        changes = []
        for change in entry.diff or []:
            cell, label = _split_audit_field(str(change.get("field", "")))
            changes.append(
                {
                    "cell": cell,
                    "field": label,
                    "before": display_value(change.get("before")),
                    "after": display_value(change.get("after")),
                }
            )
        rows.append({"entry": entry, "changes": changes})
    return rows
