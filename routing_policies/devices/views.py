"""Pages of the device registry: the fleet's devices (filtered, paged), revoking a device,
issuing a new enrolment key. Thin like every page (see `rollouts.views`)."""

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse

from controlplane.exceptions import ValidationFailed
from controlplane.pages import form_input
from controlplane.roles import Role

from ..policies.models import Fleet
from ..policies.pages import fleet_action, fleet_page
from ..policies.selectors import published_versions
from ..policies.view_models import display_value, field_label
from ..rollouts.selectors import fleet_assignment
from ..segments.rules import REPORTED_ATTRIBUTES
from ..segments.selectors import segment_rules
from . import schemas, selectors, services

DEVICE_PAGE_SIZE = 50
ONLINE_CHOICES = ("all", "online", "offline")


def _device_filters(request: HttpRequest) -> tuple[dict[str, str], dict[str, Any], str]:
    """The list's filters as shown in the form, as passed to the selector, and a problem."""
    online = request.GET.get("online") or "all"
    shown = {
        "version": (request.GET.get("version") or "").strip().lstrip("v"),
        "online": online if online in ONLINE_CHOICES else "all",
        "platform": (request.GET.get("platform") or "").strip(),
    }
    # The version (`3` or `v3`) and the platform as the API's query takes them; the page's
    # online choice (all, online, offline) is its own.
    typed = QueryDict(mutable=True)
    typed.update({name: shown[name] for name in ("version", "platform")})
    problem = ""
    values: dict[str, Any] = {}
    try:
        values = form_input(schemas.DeviceListQuerySerializer, typed)
    except ValidationFailed as exc:
        problem = exc.message
    query: dict[str, Any] = {
        "version": values.get("version"),
        "online": {"online": True, "offline": False}.get(shown["online"]),
        "platform": values.get("platform"),
    }
    return shown, query, problem


def _devices_page(
    request: HttpRequest, fleet: Fleet, *, new_key: str = "", status: int = 200
) -> HttpResponse:
    shown, query, problem = _device_filters(request)
    assignment = fleet_assignment(fleet.pk)
    devices = selectors.device_query(fleet=fleet, assignment=assignment, **query)
    # `get_page` answers the last page for a number past the end and the first for a bad one.
    page = Paginator(devices if not problem else devices.none(), DEVICE_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    filters = {name: value for name, value in shown.items() if value and value != "all"}
    rows = selectors.device_rows(
        page.object_list, assignment=assignment, segments=segment_rules(fleet=fleet)
    )
    for row in rows:  # the page names what a device did not report, beside what it did
        row["unknown_attributes"] = [
            name for name in REPORTED_ATTRIBUTES if row["attributes"][name] is None
        ]
        row["reported_count"] = len(REPORTED_ATTRIBUTES)
    context = {
        "fleet": fleet,
        "devices": rows,
        "page": page,
        "page_links": [
            {
                "number": number,
                "url": f"?{urlencode({**filters, 'page': number})}"
                if isinstance(number, int)
                else "",
            }
            # Gaps (…) come as a text, not a number.
            for number in page.paginator.get_elided_page_range(page.number, on_each_side=2)
        ],
        "previous_url": f"?{urlencode({**filters, 'page': page.previous_page_number()})}"
        if page.has_previous()
        else "",
        "next_url": f"?{urlencode({**filters, 'page': page.next_page_number()})}"
        if page.has_next()
        else "",
        "filters": shown,
        "filtered": any(shown[name] for name in ("version", "platform"))
        or shown["online"] != "all",
        "error": problem,
        "versions": published_versions(fleet=fleet),
        "platforms": selectors.device_platforms(fleet=fleet),
        "counts": selectors.device_counts(fleet=fleet),
        "key_prefix": selectors.enrollment_key_prefix(fleet=fleet),
        "new_key": new_key,
    }
    response = render(
        request, "routing_policies/devices.html", context, status=400 if problem else status
    )
    if new_key:
        response["Cache-Control"] = "no-store"  # the key is shown once; never from a cache
    return response


device_list_page = fleet_page(
    _devices_page, "The fleet's devices, filtered by version, online state and platform."
)


def _device_page(request: HttpRequest, fleet: Fleet, device_id: str) -> HttpResponse:
    device = selectors.device_get(fleet=fleet, device_id=device_id)
    if device is None:
        raise Http404(f"Fleet {fleet.slug!r} has no device {device_id!r}.")
    text = (request.GET.get("version") or "").strip().lstrip("v")
    number = int(text) if text.isdigit() and 0 < len(text) < 10 else None
    table = selectors.device_table(fleet=fleet, device=device, number=number)
    if number is not None and table["version"] is None:
        raise Http404(f"Fleet {fleet.slug!r} has no published version {number}.")
    assignment = fleet_assignment(fleet.pk)
    (row,) = selectors.device_rows(
        [device], assignment=assignment, segments=segment_rules(fleet=fleet)
    )
    for cell in table["cells"]:
        cell["fields"] = [
            {
                "label": field_label(path),
                "value": display_value(value),
                "overridden": path in cell["overridden"],
            }
            for path, value in cell["values"].items()
        ]
    context = {
        "fleet": fleet,
        "device": row,
        "table": table,
        "versions": published_versions(fleet=fleet),
        "unknown_attributes": [n for n in REPORTED_ATTRIBUTES if row["attributes"][n] is None],
    }
    return render(request, "routing_policies/device.html", context)


device_page = fleet_page(
    _device_page, "One device: its attributes, its segments and the cell values it runs."
)


@fleet_action(Role.PUBLISHER)
def device_revoke(request: HttpRequest, fleet: Fleet, device_id: str) -> HttpResponse:
    """Revoke a device's token; its open connection is closed."""
    device = selectors.device_get(fleet=fleet, device_id=device_id)
    if device is None:
        raise Http404(f"Fleet {fleet.slug!r} has no device {device_id!r}.")
    already = device.revoked_at is not None
    services.device_revoke(actor=request.user, device=device)
    if already:
        messages.info(request, f"{device_id} was already revoked.")
    else:
        messages.success(
            request,
            f"Revoked {device_id}: its token no longer works and its open connection was closed.",
        )
    url = reverse("device-list", args=[fleet.slug])
    # Back to the same filtered list; only the filter names are carried over.
    filters = {
        name: request.POST[name]
        for name in ("version", "online", "platform", "page")
        if request.POST.get(name)
    }
    return HttpResponseRedirect(f"{url}?{urlencode(filters)}" if filters else url)


@fleet_action(Role.PUBLISHER)
def enrollment_key_rotate(request: HttpRequest, fleet: Fleet) -> HttpResponse:
    """Issue a new enrolment key and show it on this response only (it is stored hashed)."""
    key = services.fleet_enrollment_key_rotate(actor=request.user, fleet=fleet)
    return _devices_page(request, fleet, new_key=key)
