"""Pages of the policy editor: fleets, the latency–privacy matrix, versions, diffs, audit log.

Views stay thin: they read through `selectors`, write through one `services` call, take page
input through `forms`, and show a refused change on the page again (`controlplane.pages`):
problems listed per cell and field, a banner for conflicts. What a page shows is built in
`view_models`.
"""

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from rest_framework import serializers

from controlplane.exceptions import ApplicationError, Conflict, NotFound, ValidationFailed
from controlplane.pages import form_input, posted_values, refusal, role_required
from controlplane.roles import Role, has_role

from ..cell_schema import CELL_FIELDS, DIMENSION_LABELS, DIMENSIONS, FIELDS_BY_PATH, cell_key_label
from ..validation import DIMENSION_VALUE_PATTERN
from . import schemas, selectors, services
from .forms import (
    CellEdit,
    ImportError_,
    ImportTooLarge,
    draft_revision,
    parse_cell_edit,
    parse_value,
    read_import_document,
)
from .models import MAX_NOTE_LENGTH, Fleet, PolicyVersion
from .pages import fleet_action, fleet_or_404, fleet_page
from .signals import fleet_running, lab_draft_headline, segment_rules
from .view_models import (
    audit_rows,
    diff_marks,
    diff_override_rows,
    diff_rows,
    draft_changes,
    edit_fields,
    export_url,
    field_label,
    form_fields,
    grid,
    legend,
    overrides_view,
    problem_list,
    version_ref,
    version_running,
)

STALE_MESSAGE = (
    "Someone else changed this draft since you opened it (you had revision {mine}, it is now "
    "{current}). Your changes were not saved. Reload to see their changes."
)


def _version_or_404(fleet: Fleet, ref: selectors.VersionRef) -> PolicyVersion:
    try:
        return selectors.version_get(fleet=fleet, ref=ref)
    except NotFound as exc:
        raise Http404(exc.message) from None


def _fleet_url(fleet: Fleet, version: PolicyVersion | None = None) -> str:
    url = reverse("fleet-detail", args=[fleet.slug])
    return f"{url}?version={version.number}" if version and not version.is_draft else url


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
    add_form: dict[str, str] | None = None,
    override_form: dict[str, str] | None = None,
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
        "problems": problem_list(problems),
        "published_numbers": selectors.published_numbers(fleet=fleet),
        "legend": legend(),
        "running": fleet_running(fleet=fleet),
    }
    if version is None:
        return render(request, "routing_policies/fleet_detail.html", context, status=status)
    table = selectors.version_table(version=version)
    editable = version.is_draft and has_role(request.user, Role.EDITOR)
    revision = form_revision if form_revision is not None else version.revision
    changes = draft_changes(fleet, version) if version.is_draft else None
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
            "version_running": "" if version.is_draft else version_running(version, running),
            "marks_against": changes["base"] if changes else "",
            "grid": grid(
                version,
                table,
                problems=problems,
                changes=changes["changes"] if changes else None,
                added=changes["added"] if changes else (),
                selected=selected,
                overrides=version.overrides,
            ),
            "overrides": overrides_view(selectors.version_overrides(version=version), table),
            "export_url": export_url(fleet, version),
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
                "edit_groups": edit_fields(edit, problems),
                "cell_values": {cell_key_label(key): values for key, values in table.items()},
                "add_form": add_form or {"dimension": "task_type"},
                "dimension_value_pattern": DIMENSION_VALUE_PATTERN,
                "publish_note": publish_note,
                "max_note": MAX_NOTE_LENGTH,
                # The lab's backtest of this revision, beside Publish (the lab registers it).
                "backtest": lab_draft_headline(fleet=fleet, draft=version),
                "override_form": override_form or {},
                "segment_names": list(segment_rules(fleet=fleet)),
                "cell_labels": [cell_key_label(key) for key in table],
                "override_fields": [
                    {"path": spec.path, "label": field_label(spec.path)} for spec in CELL_FIELDS
                ],
                # The service's own check: Publish is off while it would refuse (no_changes).
                "same_as": selectors.draft_same_as(fleet=fleet, draft=version, table=table),
            }
        )
    return render(request, "routing_policies/fleet_detail.html", context, status=status)


def _stale_banner(fleet: Fleet, exc: ApplicationError, mine: int | None) -> str:
    """Someone changed the draft meanwhile: which revision the user had, which it is now."""
    current = next((d["current_revision"] for d in exc.details if "current_revision" in d), None)
    if current is None:
        draft = selectors.draft_get(fleet=fleet)
        current = draft.revision if draft else "?"
    return STALE_MESSAGE.format(mine=mine, current=current)


def _refusal(
    request: HttpRequest,
    fleet: Fleet,
    exc: ApplicationError,
    *,
    posted_revision: int | None,
    **page: Any,
) -> HttpResponse:
    """The fleet page again, explaining why a change was refused; nothing was saved. A clash
    with someone else's change is a banner; bad input names its cells and fields."""
    if isinstance(exc, NotFound):
        raise Http404(exc.message)
    if isinstance(exc, Conflict):
        banner = (
            _stale_banner(fleet, exc, posted_revision)
            if exc.code == "stale_revision"
            else f"{exc.message} Nothing was saved."
        )
        return _fleet_page(
            request,
            fleet,
            status=exc.status_code,
            banner=banner,
            form_revision=posted_revision,
            **page,
        )

    def page_again(**shown: Any) -> HttpResponse:
        return _fleet_page(request, fleet, form_revision=posted_revision, **shown, **page)

    return refusal(page_again, exc, nothing="")


# --- pages ------------------------------------------------------------------------------------


@role_required(Role.VIEWER)
@require_GET
def fleet_list_page(request: HttpRequest) -> HttpResponse:
    """Fleets with their latest version and draft state; publishers may create one."""
    return _fleet_list(request)


def _fleet_list(
    request: HttpRequest, *, status: int = 200, error: str = "", problems: Any = ()
) -> HttpResponse:
    posted = posted_values(request) if request.method == "POST" else {}
    return render(
        request,
        "routing_policies/fleet_list.html",
        {
            "fleets": selectors.fleet_list(),
            "create_fields": form_fields(
                schemas.FleetCreateInputSerializer, posted=posted, problems=problems
            ),
            "create_error": error,
        },
        status=status,
    )


@role_required(Role.PUBLISHER)
@require_POST
def fleet_create(request: HttpRequest) -> HttpResponse:
    """Create a fleet (a draft of default cells over the seed dimensions)."""
    try:
        values = form_input(schemas.FleetCreateInputSerializer, request.POST)
        fleet = services.fleet_create(actor=request.user, **values)
    except ValidationFailed as exc:
        return _fleet_list(request, status=exc.status_code, problems=exc.details)
    except ApplicationError as exc:
        problems = [{"field": "slug", "message": exc.message}] if isinstance(exc, Conflict) else ()
        error = "" if problems else exc.message
        return _fleet_list(request, status=exc.status_code, error=error, problems=problems)
    messages.success(request, f"Created fleet {fleet.slug} with a draft; edit it, then publish v1.")
    return redirect("fleet-detail", slug=fleet.slug)


fleet_detail_page = fleet_page(
    _fleet_page, "The latency–privacy matrix of the draft (or latest, or `?version=N`)."
)


def _shown(value: object) -> str:
    """A cell value as the edit panel shows it: yes/no for booleans, numbers as typed."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.12g}" if isinstance(value, float) else str(value)


@role_required(Role.EDITOR)
@require_POST
def draft_cells_update(request: HttpRequest, slug: str) -> HttpResponse:
    """Apply the edit panel to the selected cells of the draft (all or nothing)."""
    fleet = fleet_or_404(slug)
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
    labels = ", ".join(cell_key_label(key) for key in edit.cells[:4])
    more = f" and {len(edit.cells) - 4} more" if len(edit.cells) > 4 else ""
    selection = urlencode([("cell", cell_key_label(key)) for key in edit.cells], safe="/")
    back = f"{reverse('fleet-detail', args=[fleet.slug])}?{selection}"
    if not edit.values:
        # Every field was left as the cell has it (or blank): a no-op, not a mistake.
        messages.info(
            request,
            f"Nothing changed: no field of {labels}{more} was given a new value, so there "
            "was nothing to save. Type a new value into a field, then save.",
        )
        return HttpResponseRedirect(back)
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
    if draft.revision == edit.revision:
        had = ", ".join(
            f"{field_label(path)} {_shown(value)}" for path, value in edit.values.items()
        )
        messages.info(
            request,
            f"Nothing changed: {labels}{more} already had {had}, so there was nothing to save.",
        )
    else:
        fields = ", ".join(field_label(path) for path in edit.values)
        messages.success(
            request,
            f"Saved {fields} on {labels}{more}; the draft is now at revision {draft.revision}.",
        )
    # The edited cells stay selected, so a second change to them is one click away.
    return HttpResponseRedirect(back)


# A change the fleet page posts: `change(request, fleet, values)` makes it with the form's values
# (validated by the API's input serializer) and answers the success message and where to go.
Change = Callable[[HttpRequest, Fleet, dict[str, Any]], tuple[str, str]]
# What the fleet page shows again of the posted form when the change is refused.
Shown = Callable[[HttpRequest], dict[str, Any]]


def _draft_change(
    role: Role, serializer_class: type[serializers.Serializer[Any]], shown: Shown | None = None
) -> Callable[[Change], Callable[[HttpRequest, str], HttpResponse]]:
    """The POST view of a change of the fleet page by `role` and up; a refusal shows the fleet
    page again saying why (nothing was saved), with what `shown` keeps of the form."""

    def decorate(change: Change) -> Callable[[HttpRequest, str], HttpResponse]:
        @fleet_action(role)
        @functools.wraps(change)
        def view(request: HttpRequest, fleet: Fleet) -> HttpResponse:
            revision = draft_revision(request.POST)
            try:
                message, url = change(request, fleet, form_input(serializer_class, request.POST))
            except ApplicationError as exc:
                page = shown(request) if shown is not None else {}
                return _refusal(request, fleet, exc, posted_revision=revision, **page)
            messages.success(request, message)
            return HttpResponseRedirect(url)

        return view

    return decorate


@_draft_change(Role.EDITOR, schemas.DraftCreateInputSerializer)
def draft_start(request: HttpRequest, fleet: Fleet, values: dict[str, Any]) -> tuple[str, str]:
    """Start the draft from the latest published version or a chosen one."""
    draft = services.policy_draft_create(
        actor=request.user, fleet=fleet, from_number=values.get("from_version")
    )
    based_on = draft.based_on.number if draft.based_on else "?"
    return f"Started a draft from v{based_on}. Select cells to edit them.", _fleet_url(fleet)


@_draft_change(Role.EDITOR, schemas.RevisionQuerySerializer)
def draft_discard(request: HttpRequest, fleet: Fleet, values: dict[str, Any]) -> tuple[str, str]:
    """Throw the draft away; published versions stay as they are."""
    services.policy_draft_discard(actor=request.user, fleet=fleet, **values)
    return "Discarded the draft.", _fleet_url(fleet)


@_draft_change(
    Role.EDITOR,
    schemas.DimensionValueAddInputSerializer,
    lambda request: {"add_form": posted_values(request)},
)
def dimension_value_add(
    request: HttpRequest, fleet: Fleet, values: dict[str, Any]
) -> tuple[str, str]:
    """Add a dimension value; its cells are copies of an existing value's cells."""
    services.policy_draft_add_dimension_value(actor=request.user, fleet=fleet, **values)
    source = values.get("copy_from") or "the first value"
    label = DIMENSION_LABELS[values["dimension"]].lower()
    message = f"Added {label} {values['value']!r}; its cells are copies of {source}."
    return message, _fleet_url(fleet)


@_draft_change(Role.EDITOR, schemas.RevisionQuerySerializer)
def dimension_value_remove(
    request: HttpRequest, fleet: Fleet, values: dict[str, Any]
) -> tuple[str, str]:
    """Remove a dimension value together with its cells (named as the API's path names them)."""
    dimension = request.POST.get("dimension", "")
    value = request.POST.get("value", "")
    services.policy_draft_remove_dimension_value(
        actor=request.user, fleet=fleet, dimension=dimension, value=value, **values
    )
    label = DIMENSION_LABELS.get(dimension, dimension).lower()
    return f"Removed {label} {value!r} and its cells.", _fleet_url(fleet)


@_draft_change(
    Role.EDITOR,
    schemas.OverrideFieldPageSerializer,
    lambda request: {"override_form": posted_values(request)},
)
def draft_override(request: HttpRequest, fleet: Fleet, values: dict[str, Any]) -> tuple[str, str]:
    """Set one field of one cell in a segment's override (its place in the precedence too), or
    take a field, a cell or the whole override out: the draft-override service either way."""
    segment, label, path = values["segment"], values.get("cell", ""), values.get("field", "")
    draft = selectors.version_get(fleet=fleet, ref="draft")
    current = next((o for o in draft.overrides if o["segment"] == segment), None)
    cells = {name: dict(fields) for name, fields in (current or {"cells": {}})["cells"].items()}
    anchor = f"{_fleet_url(fleet)}#overrides"
    # Whom, which draft revision and which segment's override: the same for every change here.
    change: dict[str, Any] = {
        "actor": request.user,
        "fleet": fleet,
        "revision": values["revision"],
        "segment": segment,
    }
    if values["action"] == "remove":
        if label and path:
            cells.get(label, {}).pop(path, None)
            cells = {name: fields for name, fields in cells.items() if fields}
        elif label:
            cells.pop(label, None)
        if not (label or path) or not cells:
            services.policy_draft_override_remove(**change)
            return f"Removed the override for segment {segment}.", anchor
        services.policy_draft_override_set(**change, cells=cells)
        return f"Took {field_label(path) if path else label} out of {segment}'s override.", anchor
    if not label or not path:
        raise ValidationFailed(
            "Choose the cell and the field to override.",
            details=[{"field": "cell" if not label else "field", "message": "is required"}],
        )
    value, error = parse_value(FIELDS_BY_PATH[path], values.get("value", "").strip())
    if error:
        raise ValidationFailed(
            f"{field_label(path)}: {error}",
            details=[{"field": path, "message": error, "cell": label, "segment": segment}],
        )
    cells.setdefault(label, {})[path] = value
    services.policy_draft_override_set(**change, cells=cells, position=values.get("position"))
    return f"Segment {segment} now overrides {field_label(path)} in {label}.", anchor


@_draft_change(
    Role.PUBLISHER,
    schemas.PublishInputSerializer,
    lambda request: {"publish_note": request.POST.get("note") or ""},
)
def draft_publish(request: HttpRequest, fleet: Fleet, values: dict[str, Any]) -> tuple[str, str]:
    """Publish the draft as the next numbered version."""
    version = services.policy_version_publish(actor=request.user, fleet=fleet, **values)
    running = fleet_running(fleet=fleet)
    if running["stable"] == version.number:
        what_next = "It is the fleet's first version, so every device runs it now."
    else:
        what_next = (
            f"Devices still run v{running['stable']}: no device runs v{version.number} "
            "until a publisher starts a rollout of it or switches the fleet to it."
        )
    return f"Published v{version.number}. {what_next}", _fleet_url(fleet, version)


@role_required(Role.EDITOR)
def draft_import_page(request: HttpRequest, slug: str) -> HttpResponse:
    """Upload or paste a policy document (the export format) as the draft's table."""
    fleet = fleet_or_404(slug)
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
    revision = draft_revision(request.POST)
    pasted = request.POST.get("document_text") or ""
    context.update({"pasted": pasted, "form_revision": posted})
    try:
        document = read_import_document(request.FILES.get("document_file"), pasted)
    except ImportError_ as exc:
        context["error"] = str(exc)
        status = 413 if isinstance(exc, ImportTooLarge) else 400
        return render(request, "routing_policies/import.html", context, status=status)
    try:
        checked = schemas.document_input(document, with_revision=False)
        draft = services.policy_draft_import(
            actor=request.user, fleet=fleet, document=checked, revision=revision
        )
    except ApplicationError as exc:
        if isinstance(exc, Conflict) and exc.code == "stale_revision":
            context["banner"] = _stale_banner(fleet, exc, revision)
        elif isinstance(exc, Conflict):
            context["banner"] = (
                "Someone started a draft since you opened this page. Nothing was imported. "
                "Reload to import into their draft, or discard it first."
                if exc.code == "revision_required"
                else f"{exc.message} Nothing was imported."
            )
        else:
            context["error"] = exc.message
            context["problems"] = problem_list(exc.details)
        return render(request, "routing_policies/import.html", context, status=exc.status_code)
    messages.success(
        request,
        f"Imported {len(selectors.version_table(version=draft))} cells into the draft "
        f"(revision {draft.revision}). Review them, then publish.",
    )
    return redirect("fleet-detail", slug=fleet.slug)


@fleet_page
def version_list_page(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Every version, the draft first, with compare controls."""
    versions = list(selectors.versions_list(fleet=fleet))
    refs = [version_ref(v) for v in versions]
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


@fleet_page
def diff_page(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """What changed from version a to version b, on b's grid and field by field."""
    default_a, default_b = selectors.default_diff_refs(fleet=fleet)
    ref_a = (request.GET.get("a") or default_a).strip()
    ref_b = (request.GET.get("b") or default_b).strip()
    versions = list(selectors.versions_list(fleet=fleet))
    context: dict[str, Any] = {
        "fleet": fleet,
        "choices": [{"ref": version_ref(v), "label": v.label} for v in versions],
        "ref_a": ref_a,
        "ref_b": ref_b,
        "legend": legend(),
    }
    if not ref_a or not ref_b:
        return render(request, "routing_policies/diff.html", context)
    version_a, version_b = _version_or_404(fleet, ref_a), _version_or_404(fleet, ref_b)
    diff = selectors.version_diff(fleet=fleet, a=ref_a, b=ref_b)
    changes, added = diff_marks(diff)
    rows = diff_rows(diff)
    context.update(
        {
            "override_rows": diff_override_rows(diff),
            "version_a": version_a,
            "version_b": version_b,
            "diff": diff,
            "rows": rows,
            "dimension_changes": [
                {"label": DIMENSION_LABELS[name], **change}
                for name, change in diff["dimensions"].items()
            ],
            "grid": grid(
                version_b,
                selectors.version_table(version=version_b),
                changes=changes,
                added=added,
            ),
            "marks_against": version_a.label,
        }
    )
    return render(request, "routing_policies/diff.html", context)


@fleet_page
def audit_page(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Who changed what in this fleet, newest first, each entry with its before/after diff."""
    limit = 200
    entries = audit_rows(selectors.audit_list(fleet=fleet, limit=limit))
    return render(
        request,
        "routing_policies/audit.html",
        {"fleet": fleet, "entries": entries, "limit": limit, "full": len(entries) >= limit},
    )
