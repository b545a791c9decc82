"""Pages of the policy editor: fleets, the latency–privacy matrix, versions, diffs, audit log.

Views stay thin: they read through `selectors`, write through one `services` call, and turn
application errors into pages (problems listed per cell and field, a banner for conflicts).
Roles are checked with `roles.has_role`, exactly as the API's permissions do.
"""

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlplane.exceptions import ApplicationError, Conflict, NotFound

from . import selectors, services
from .cell_schema import (
    CELL_FIELDS,
    DIMENSION_LABELS,
    DIMENSIONS,
    FIELDS_BY_PATH,
    MODES,
    WEIGHT_PATHS,
    cell_key_label,
)
from .documents import Table
from .forms import (
    FIELD_GROUPS,
    CellEdit,
    DimensionValueAddForm,
    DimensionValueRemoveForm,
    FleetCreateForm,
    ImportError_,
    ImportTooLarge,
    input_name,
    parse_cell_edit,
    parse_revision,
    range_hint,
    read_import_document,
)
from .models import Fleet, PolicyVersion
from .permissions import IsEditor, IsPublisher, IsViewer
from .roles import Role, has_role, user_role
from .selectors import rollout_pages

View = TypeVar("View", bound=Callable[..., HttpResponse])

# The same refusal texts as the API's permissions, so both say the same thing.
_ROLE_REFUSALS = {
    Role.VIEWER: IsViewer.message,
    Role.EDITOR: IsEditor.message,
    Role.PUBLISHER: IsPublisher.message,
}

MODE_DESCRIPTIONS = {
    "device_only": "always on the device",
    "cloud_only": "always in the cloud",
    "auto": "score vs θ decides",
    "draft_refine": "device drafts, cloud refines",
}

# Modes that route without scoring the task: θ is stored but does nothing there.
PINNED_MODES = ("device_only", "cloud_only")

STALE_MESSAGE = (
    "Someone else changed this draft since you opened it (you had revision {mine}, it is now "
    "{current}). Your changes were not saved. Reload to see their changes."
)


def role_required(role: Role) -> Callable[[View], View]:
    """Anonymous users go to the login page; users below `role` get 403."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                current = user_role(request.user)
                you_are = f"You are {current.with_article}" if current else "You have no role yet"
                raise PermissionDenied(f"{_ROLE_REFUSALS[role]} {you_are}.")
            return view(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


# --- reading helpers --------------------------------------------------------------------------


def _fleet_or_404(slug: str) -> Fleet:
    try:
        return selectors.fleet_get(slug=slug)
    except NotFound as exc:
        raise Http404(exc.message) from None


def _version_or_404(fleet: Fleet, ref: selectors.VersionRef) -> PolicyVersion:
    try:
        return selectors.version_get(fleet=fleet, ref=ref)
    except NotFound as exc:
        raise Http404(exc.message) from None


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


def _ref_of(version: PolicyVersion) -> str:
    return "draft" if version.is_draft else str(version.number)


def _export_url(fleet: Fleet, version: PolicyVersion) -> str:
    url = reverse("api-version-document", args=[fleet.slug, _ref_of(version)])
    return f"{url}?download=1"


def _fleet_url(fleet: Fleet, version: PolicyVersion | None = None) -> str:
    url = reverse("fleet-detail", args=[fleet.slug])
    return f"{url}?version={version.number}" if version and not version.is_draft else url


# --- the grid ---------------------------------------------------------------------------------


def _problem_text(problem: dict[str, Any]) -> str:
    return f"{field_label(problem.get('field', ''))}: {problem.get('message', '')}"


def _grid(
    version: PolicyVersion,
    table: Table,
    *,
    problems: Iterable[dict[str, Any]] = (),
    changes: dict[str, dict[str, tuple[str, str]]] | None = None,
    added: Iterable[str] = (),
    selected: Iterable[str] = (),
) -> dict[str, Any]:
    """The latency–privacy matrix: task type × latency budget down, privacy tier across."""
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
                    }
                )
            rows.append(
                {"latency_budget": budget, "row_id": f"{task_type}/{budget}", "cells": cells}
            )
        groups.append({"task_type": task_type, "rows": rows})
    return {"tiers": dims["privacy_tier"], "groups": groups}


def _diff_marks(
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


def _draft_changes(fleet: Fleet, draft: PolicyVersion) -> dict[str, Any] | None:
    """How the draft differs from the version it started from, for the grid and Publish."""
    base = draft.based_on.number if draft.based_on else None
    if base is None:
        return None  # the fleet's first table: nothing to compare with
    diff = selectors.version_diff(fleet=fleet, a=base, b="draft")
    changes, added = _diff_marks(diff)
    count = diff["changed_cells"]
    return {
        "base": f"v{base}",
        "changes": changes,
        "added": added,
        "count": count,
        "summary": f"{count} cell{'' if count == 1 else 's'} changed since v{base}",
        "removed": sum(1 for cell in diff["cells"] if cell["status"] == "removed"),
        "diff_url": f"{reverse('version-diff', args=[fleet.slug])}?a={base}&b=draft",
    }


def _version_running(version: PolicyVersion, running: dict[str, Any]) -> str:
    """`stable`, `candidate` or `idle`: whether devices run this published version."""
    rollout = running["rollout"]
    if version.number == running["stable"]:
        return "stable"
    if rollout and version.number == rollout["candidate"]:
        return "candidate"
    return "idle"


def _legend() -> list[dict[str, str]]:
    return [{"mode": mode, "description": MODE_DESCRIPTIONS[mode]} for mode in MODES]


def _edit_fields(edit: CellEdit | None, problems: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _problem_list(problems: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    return [
        {
            "cell": problem.get("cell", ""),
            "field": field_label(problem.get("field", "")),
            "message": problem.get("message", ""),
        }
        for problem in problems
    ]


def _fleet_page(
    request: HttpRequest,
    fleet: Fleet,
    *,
    version: PolicyVersion | None = None,
    status: int = 200,
    error: str = "",
    problems: list[dict[str, Any]] | None = None,
    banner: str = "",
    edit: CellEdit | None = None,
    form_revision: int | None = None,
    publish_note: str = "",
    add_form: DimensionValueAddForm | None = None,
) -> HttpResponse:
    """Render the fleet's grid: the draft if any, else the latest published version."""
    problems = problems or []
    draft = selectors.draft_get(fleet=fleet)
    latest = selectors.latest_published(fleet=fleet)
    if version is None:
        requested = request.GET.get("version")
        version = _version_or_404(fleet, requested) if requested else (draft or latest)
    context: dict[str, Any] = {
        "fleet": fleet,
        "draft": draft,
        "latest": latest,
        "version": version,
        "banner": banner,
        "error": error,
        "problems": _problem_list(problems),
        "published_numbers": list(
            PolicyVersion.objects.filter(fleet=fleet, number__isnull=False)
            .order_by("-number")
            .values_list("number", flat=True)
        ),
        "legend": _legend(),
        "running": rollout_pages.fleet_running(fleet=fleet),
    }
    if version is None:
        return render(request, "routing_policies/fleet_detail.html", context, status=status)
    table = selectors.version_table(version=version)
    editable = version.is_draft and has_role(request.user, Role.EDITOR)
    revision = form_revision if form_revision is not None else version.revision
    changes = _draft_changes(fleet, version) if version.is_draft else None
    if edit:
        selected = ["/".join(key) for key in edit.cells]
    else:
        # After a save the page comes back with the cells that were edited still selected.
        known = {cell_key_label(key) for key in table}
        selected = [label for label in request.GET.getlist("cell") if label in known and editable]
    running = context["running"]
    context.update(
        {
            "is_current": version == (draft or latest),
            "editable": editable,
            "form_revision": revision,
            "draft_changes": changes,
            "version_running": "" if version.is_draft else _version_running(version, running),
            "marks_against": changes["base"] if changes else "",
            "grid": _grid(
                version,
                table,
                problems=problems,
                changes=changes["changes"] if changes else None,
                added=changes["added"] if changes else (),
                selected=selected,
            ),
            "export_url": _export_url(fleet, version),
            "dimensions": [
                {
                    "name": name,
                    "label": DIMENSION_LABELS[name],
                    "values": version.dimensions[name],
                    "removable": len(version.dimensions[name]) > 1,
                }
                for name in DIMENSIONS
            ],
            "cell_count": len(table),
        }
    )
    if editable:
        context.update(
            {
                "edit_groups": _edit_fields(edit, problems),
                "cell_values": {cell_key_label(key): values for key, values in table.items()},
                "add_form": add_form
                or DimensionValueAddForm(initial={"revision": revision, "dimension": "task_type"}),
                "publish_note": publish_note,
                "max_note": 2000,
            }
        )
    return render(request, "routing_policies/fleet_detail.html", context, status=status)


def _refusal(
    request: HttpRequest,
    fleet: Fleet,
    exc: ApplicationError,
    *,
    posted_revision: int | None,
    **page: Any,
) -> HttpResponse:
    """The fleet page again, explaining why a change was refused; nothing was saved."""
    if isinstance(exc, NotFound):
        raise Http404(exc.message)
    if isinstance(exc, Conflict) and exc.code == "stale_revision":
        current = next(
            (d["current_revision"] for d in exc.details if "current_revision" in d), None
        )
        if current is None:
            draft = selectors.draft_get(fleet=fleet)
            current = draft.revision if draft else "?"
        banner = STALE_MESSAGE.format(mine=posted_revision, current=current)
        return _fleet_page(
            request, fleet, status=409, banner=banner, form_revision=posted_revision, **page
        )
    if isinstance(exc, Conflict):
        return _fleet_page(
            request,
            fleet,
            status=exc.status_code,
            banner=f"{exc.message} Nothing was saved.",
            form_revision=posted_revision,
            **page,
        )
    return _fleet_page(
        request,
        fleet,
        status=exc.status_code,
        error=exc.message,
        problems=exc.details,
        form_revision=posted_revision,
        **page,
    )


# --- pages ------------------------------------------------------------------------------------


@role_required(Role.VIEWER)
@require_GET
def fleet_list_page(request: HttpRequest) -> HttpResponse:
    """Fleets with their latest version and draft state; publishers may create one."""
    return _fleet_list(request, FleetCreateForm())


def _fleet_list(request: HttpRequest, form: FleetCreateForm, status: int = 200) -> HttpResponse:
    return render(
        request,
        "routing_policies/fleet_list.html",
        {"fleets": selectors.fleet_list(), "create_form": form},
        status=status,
    )


@role_required(Role.PUBLISHER)
@require_POST
def fleet_create(request: HttpRequest) -> HttpResponse:
    """Create a fleet (a draft of default cells over the seed dimensions)."""
    form = FleetCreateForm(request.POST)
    if not form.is_valid():
        return _fleet_list(request, form, status=400)
    try:
        fleet = services.fleet_create(actor=request.user, **form.cleaned_data)
    except ApplicationError as exc:
        form.add_error("slug" if isinstance(exc, Conflict) else None, exc.message)
        return _fleet_list(request, form, status=exc.status_code)
    messages.success(request, f"Created fleet {fleet.slug} with a draft; edit it, then publish v1.")
    return redirect("fleet-detail", slug=fleet.slug)


@role_required(Role.VIEWER)
@require_GET
def fleet_detail_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The latency–privacy matrix of the draft (or latest, or `?version=N`)."""
    return _fleet_page(request, _fleet_or_404(slug))


@role_required(Role.EDITOR)
@require_POST
def draft_cells_update(request: HttpRequest, slug: str) -> HttpResponse:
    """Apply the edit panel to the selected cells of the draft (all or nothing)."""
    fleet = _fleet_or_404(slug)
    edit = parse_cell_edit(request.POST)
    if edit.problems:
        return _fleet_page(
            request,
            fleet,
            status=400,
            error="Nothing was saved: fix the fields below.",
            problems=edit.problems,
            edit=edit,
            form_revision=edit.revision,
        )
    assert edit.revision is not None
    try:
        draft = services.policy_draft_update_cells(
            actor=request.user,
            fleet=fleet,
            revision=edit.revision,
            edits=[
                {
                    "task_type": key[0],
                    "latency_budget": key[1],
                    "privacy_tier": key[2],
                    "values": edit.values,
                }
                for key in edit.cells
            ],
        )
    except ApplicationError as exc:
        return _refusal(request, fleet, exc, posted_revision=edit.revision, edit=edit)
    labels = ", ".join(cell_key_label(key) for key in edit.cells[:4])
    more = f" and {len(edit.cells) - 4} more" if len(edit.cells) > 4 else ""
    if draft.revision == edit.revision:
        messages.info(request, f"Nothing changed: {labels}{more} already had those values.")
    else:
        fields = ", ".join(field_label(path) for path in edit.values)
        messages.success(
            request,
            f"Saved {fields} on {labels}{more}; the draft is now at revision {draft.revision}.",
        )
    # The edited cells stay selected, so a second change to them is one click away.
    selection = urlencode([("cell", cell_key_label(key)) for key in edit.cells], safe="/")
    return HttpResponseRedirect(f"{reverse('fleet-detail', args=[fleet.slug])}?{selection}")


@role_required(Role.EDITOR)
@require_POST
def draft_start(request: HttpRequest, slug: str) -> HttpResponse:
    """Start the draft from the latest published version or a chosen one."""
    fleet = _fleet_or_404(slug)
    raw = (request.POST.get("from_version") or "").strip()
    from_number = parse_revision(raw) if raw else None
    if raw and from_number is None:
        return _fleet_page(request, fleet, status=400, error=f"{raw!r} is not a version number.")
    try:
        draft = services.policy_draft_create(
            actor=request.user, fleet=fleet, from_number=from_number
        )
    except ApplicationError as exc:
        return _refusal(request, fleet, exc, posted_revision=None)
    based_on = draft.based_on.number if draft.based_on else "?"
    messages.success(request, f"Started a draft from v{based_on}. Select cells to edit them.")
    return redirect("fleet-detail", slug=fleet.slug)


@role_required(Role.EDITOR)
@require_POST
def draft_discard(request: HttpRequest, slug: str) -> HttpResponse:
    """Throw the draft away; published versions stay as they are."""
    fleet = _fleet_or_404(slug)
    revision = parse_revision(request.POST.get("revision"))
    if revision is None:
        return _fleet_page(request, fleet, status=400, error="The form lost the draft revision.")
    try:
        services.policy_draft_discard(actor=request.user, fleet=fleet, revision=revision)
    except ApplicationError as exc:
        return _refusal(request, fleet, exc, posted_revision=revision)
    messages.success(request, "Discarded the draft.")
    return redirect("fleet-detail", slug=fleet.slug)


@role_required(Role.EDITOR)
@require_POST
def dimension_value_add(request: HttpRequest, slug: str) -> HttpResponse:
    """Add a dimension value; its cells are copies of an existing value's cells."""
    fleet = _fleet_or_404(slug)
    form = DimensionValueAddForm(request.POST)
    revision = parse_revision(request.POST.get("revision"))
    if not form.is_valid():
        problems = [
            {"field": name, "message": " ".join(str(e) for e in errors)}
            for name, errors in form.errors.items()
        ]
        return _fleet_page(
            request,
            fleet,
            status=400,
            error="The new value was not added.",
            problems=problems,
            add_form=form,
            form_revision=revision,
        )
    data = form.cleaned_data
    try:
        services.policy_draft_add_dimension_value(
            actor=request.user,
            fleet=fleet,
            revision=data["revision"],
            dimension=data["dimension"],
            value=data["value"].strip(),
            copy_from=data["copy_from"].strip() or None,
        )
    except ApplicationError as exc:
        return _refusal(request, fleet, exc, posted_revision=revision, add_form=form)
    source = data["copy_from"].strip() or "the first value"
    messages.success(
        request,
        f"Added {DIMENSION_LABELS[data['dimension']].lower()} {data['value'].strip()!r}; "
        f"its cells are copies of {source}.",
    )
    return redirect("fleet-detail", slug=fleet.slug)


@role_required(Role.EDITOR)
@require_POST
def dimension_value_remove(request: HttpRequest, slug: str) -> HttpResponse:
    """Remove a dimension value together with its cells."""
    fleet = _fleet_or_404(slug)
    form = DimensionValueRemoveForm(request.POST)
    revision = parse_revision(request.POST.get("revision"))
    if not form.is_valid():
        return _fleet_page(
            request, fleet, status=400, error="Say which value to remove.", form_revision=revision
        )
    data = form.cleaned_data
    try:
        services.policy_draft_remove_dimension_value(
            actor=request.user,
            fleet=fleet,
            revision=data["revision"],
            dimension=data["dimension"],
            value=data["value"],
        )
    except ApplicationError as exc:
        return _refusal(request, fleet, exc, posted_revision=revision)
    messages.success(
        request,
        f"Removed {DIMENSION_LABELS[data['dimension']].lower()} {data['value']!r} and its cells.",
    )
    return redirect("fleet-detail", slug=fleet.slug)


@role_required(Role.PUBLISHER)
@require_POST
def draft_publish(request: HttpRequest, slug: str) -> HttpResponse:
    """Publish the draft as the next numbered version."""
    fleet = _fleet_or_404(slug)
    revision = parse_revision(request.POST.get("revision"))
    note = request.POST.get("note") or ""
    if revision is None:
        return _fleet_page(
            request,
            fleet,
            status=400,
            error="The form lost the draft revision; reload the page.",
            publish_note=note,
        )
    try:
        version = services.policy_version_publish(
            actor=request.user, fleet=fleet, revision=revision, note=note
        )
    except ApplicationError as exc:
        return _refusal(request, fleet, exc, posted_revision=revision, publish_note=note)
    running = rollout_pages.fleet_running(fleet=fleet)
    if running["stable"] == version.number:
        what_next = "It is the fleet's first version, so every device runs it now."
    else:
        what_next = (
            f"Devices still run v{running['stable']}: no device runs v{version.number} until "
            "a publisher starts a rollout of it or switches the fleet to it."
        )
    messages.success(request, f"Published v{version.number}. {what_next}")
    return HttpResponseRedirect(_fleet_url(fleet, version))


@role_required(Role.EDITOR)
def draft_import_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Upload or paste a policy document (the export format) as the draft's table."""
    fleet = _fleet_or_404(slug)
    draft = selectors.draft_get(fleet=fleet)
    context: dict[str, Any] = {
        "fleet": fleet,
        "draft": draft,
        "max_bytes": settings.MAX_REQUEST_BYTES,
        "pasted": "",
        "error": "",
        "problems": [],
        "banner": "",
        "form_revision": draft.revision if draft else "",
    }
    if request.method != "POST":
        return render(request, "routing_policies/import.html", context)
    posted = (request.POST.get("revision") or "").strip()
    revision = parse_revision(posted)
    pasted = request.POST.get("document_text") or ""
    context.update({"pasted": pasted, "form_revision": posted})
    try:
        document = read_import_document(request.FILES.get("document_file"), pasted)
    except ImportError_ as exc:
        context["error"] = str(exc)
        status = 413 if isinstance(exc, ImportTooLarge) else 400
        return render(request, "routing_policies/import.html", context, status=status)
    try:
        draft = services.policy_draft_import(
            actor=request.user, fleet=fleet, document=document, revision=revision
        )
    except ApplicationError as exc:
        if isinstance(exc, Conflict) and exc.code == "stale_revision":
            current = selectors.draft_get(fleet=fleet)
            context["banner"] = STALE_MESSAGE.format(
                mine=revision, current=current.revision if current else "?"
            )
        elif isinstance(exc, Conflict):
            context["banner"] = (
                "Someone started a draft since you opened this page. Nothing was imported. "
                "Reload to import into their draft, or discard it first."
                if exc.code == "revision_required"
                else f"{exc.message} Nothing was imported."
            )
        else:
            context["error"] = exc.message
            context["problems"] = _problem_list(exc.details)
        return render(request, "routing_policies/import.html", context, status=exc.status_code)
    messages.success(
        request,
        f"Imported {len(selectors.version_table(version=draft))} cells into the draft "
        f"(revision {draft.revision}). Review them, then publish.",
    )
    return redirect("fleet-detail", slug=fleet.slug)


@role_required(Role.VIEWER)
@require_GET
def version_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Every version, the draft first, with compare controls."""
    fleet = _fleet_or_404(slug)
    versions = list(selectors.versions_list(fleet=fleet))
    refs = [_ref_of(v) for v in versions]
    return render(
        request,
        "routing_policies/version_list.html",
        {
            "fleet": fleet,
            "versions": [{"version": v, "ref": ref} for v, ref in zip(versions, refs, strict=True)],
            "draft": next((v for v in versions if v.is_draft), None),
            "default_a": refs[1] if len(refs) > 1 else (refs[0] if refs else ""),
            "default_b": refs[0] if refs else "",
        },
    )


def _default_diff_refs(fleet: Fleet) -> tuple[str, str]:
    """b: the draft, else the latest; a: the published version before b."""
    draft = selectors.draft_get(fleet=fleet)
    latest = selectors.latest_published(fleet=fleet)
    if draft is not None:
        return (str(latest.number) if latest else "draft", "draft")
    if latest is None:
        return ("", "")
    previous = (
        PolicyVersion.objects.filter(fleet=fleet, number__lt=latest.number)
        .order_by("-number")
        .first()
    )
    return (str(previous.number if previous else latest.number), str(latest.number))


@role_required(Role.VIEWER)
@require_GET
def diff_page(request: HttpRequest, slug: str) -> HttpResponse:
    """What changed from version a to version b, on b's grid and field by field."""
    fleet = _fleet_or_404(slug)
    default_a, default_b = _default_diff_refs(fleet)
    ref_a = (request.GET.get("a") or default_a).strip()
    ref_b = (request.GET.get("b") or default_b).strip()
    versions = list(selectors.versions_list(fleet=fleet))
    context: dict[str, Any] = {
        "fleet": fleet,
        "choices": [{"ref": _ref_of(v), "label": v.label} for v in versions],
        "ref_a": ref_a,
        "ref_b": ref_b,
        "legend": _legend(),
    }
    if not ref_a or not ref_b:
        return render(request, "routing_policies/diff.html", context)
    version_a, version_b = _version_or_404(fleet, ref_a), _version_or_404(fleet, ref_b)
    diff = selectors.version_diff(fleet=fleet, a=ref_a, b=ref_b)
    changes, added = _diff_marks(diff)
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
    context.update(
        {
            "version_a": version_a,
            "version_b": version_b,
            "diff": diff,
            "rows": rows,
            "dimension_changes": [
                {"label": DIMENSION_LABELS[name], **change}
                for name, change in diff["dimensions"].items()
            ],
            "grid": _grid(
                version_b,
                selectors.version_table(version=version_b),
                changes=changes,
                added=added,
            ),
            "marks_against": version_a.label,
        }
    )
    return render(request, "routing_policies/diff.html", context)


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


@role_required(Role.VIEWER)
@require_GET
def audit_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Who changed what in this fleet, newest first, each entry with its before/after diff."""
    fleet = _fleet_or_404(slug)
    limit = 200
    entries = []
    for entry in selectors.audit_list(fleet=fleet, limit=limit):
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
        entries.append({"entry": entry, "changes": changes})
    return render(
        request,
        "routing_policies/audit.html",
        {"fleet": fleet, "entries": entries, "limit": limit, "full": len(entries) >= limit},
    )
