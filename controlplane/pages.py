"""What every server-rendered page shares: the role check, the views of a fleet's pages, page
input (the API's own input serializer through `form_input`, or a Django form where no API takes
the same input), and showing a refused change on the page it came from. (The fleet a page's URL
names is `routing_policies.pages.fleet_or_404`, which `FleetPages` is given: the shared layer
reads no part.)"""

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.views.decorators.http import require_GET, require_POST
from rest_framework import serializers

from controlplane.exceptions import ApplicationError, ValidationFailed, drf_error_details
from controlplane.permissions import ROLE_REFUSALS
from controlplane.roles import Role, has_role, user_role

View = TypeVar("View", bound=Callable[..., HttpResponse])


def role_required(role: Role) -> Callable[[View], View]:
    """Anonymous users go to the login page; users below `role` get 403, with the same words
    as the API's permissions."""

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                current = user_role(request.user)
                you_are = f"You are {current.with_article}" if current else "You have no role yet"
                raise PermissionDenied(f"{ROLE_REFUSALS[role]} {you_are}.")
            return view(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


FleetHandler = Callable[..., HttpResponse]
FleetView = Callable[..., HttpResponse]


class FleetPages:
    """The views of the pages of the fleet a URL names (`<slug>`): the handler is given the
    request, the fleet `fleet_or_404(slug)` finds (the part that owns fleets says how) and the
    URL's other parts (`request_id=3`)."""

    def __init__(self, fleet_or_404: Callable[[str], Any]) -> None:
        self.fleet_or_404 = fleet_or_404

    def _view(self, role: Role, method: Callable[[Any], Any], handler: FleetHandler) -> FleetView:
        @functools.wraps(handler)
        def view(request: HttpRequest, slug: str, **url: Any) -> HttpResponse:
            return handler(request, self.fleet_or_404(slug), **url)

        allowed: FleetView = method(view)  # require_GET / require_POST: 405 for another method
        return role_required(role)(allowed)

    def page(self, handler: FleetHandler, doc: str = "") -> FleetView:
        """The GET view that draws `handler(request, fleet)` (the same function draws the page
        again after a refused change, with why), for any role that reads it."""
        view = self._view(Role.VIEWER, require_GET, handler)
        if doc:
            view.__doc__ = doc
        return view

    def action(self, role: Role) -> Callable[[FleetHandler], FleetView]:
        """The POST view of a change made on a page of the fleet, by `role` and up."""
        return functools.partial(self._view, role, require_POST)


def posted_values(request: HttpRequest) -> dict[str, str]:
    """What the form posted, to fill it in again when the page comes back with a refusal."""
    return {key: str(value) for key, value in request.POST.items() if key != "csrfmiddlewaretoken"}


def refusal(
    render_page: Callable[..., HttpResponse],
    exc: ApplicationError,
    *,
    nothing: str = "Nothing was changed.",
    **page: Any,
) -> HttpResponse:
    """The page again, with the HTTP status of the refusal, saying why and that `nothing`
    happened; `render_page(status=, error=, problems=, **page)` draws it."""
    return render_page(
        status=exc.status_code,
        error=f"{exc.message} {nothing}".strip(),
        problems=exc.details,
        **page,
    )


def posted_change(
    request: HttpRequest,
    render_page: Callable[..., HttpResponse],
    change: Callable[[], tuple[str, str]],
) -> HttpResponse:
    """Make the change a page's form posted: `change()` makes it (one service call) and answers
    what was done and where to go next, and the browser goes there with that message. Refused,
    the page `render_page` draws comes back saying why, its form filled in as it was posted."""
    try:
        done, to = change()
    except ApplicationError as exc:
        return refusal(render_page, exc, posted=posted_values(request))
    messages.success(request, done)
    return HttpResponseRedirect(to)


# --- page input -------------------------------------------------------------------------------

_REQUIRED = object()


class WholeNumberField(forms.Field):
    """A whole number typed into a page (at least `minimum` when given). Refused as "<label>
    must be a whole number (got 'x')." (`invalid` words it otherwise); left blank, it is
    `empty` when given, else refused too."""

    kind = "a whole number"

    def __init__(
        self,
        *,
        label: str,
        empty: Any = _REQUIRED,
        minimum: int | None = None,
        invalid: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(label=label, required=False, **kwargs)
        self.empty = empty
        self.minimum = minimum
        self.invalid = invalid or "{label} must be {kind} (got {text!r})."

    def parse(self, text: str) -> Any:
        number = int(text)
        if self.minimum is not None and number < self.minimum:
            raise ValueError(text)
        return number

    def to_python(self, value: Any) -> Any:
        text = str(value or "").strip()
        if not text and self.empty is not _REQUIRED:
            return self.empty
        try:
            return self.parse(text)
        except ValueError:
            message = self.invalid.format(label=self.label, kind=self.kind, text=text[:40])
            raise forms.ValidationError(message, code="invalid") from None


class PageForm(forms.Form):
    """A form whose values a view takes as they are or refuses as one `ValidationFailed`,
    which `refusal` shows: the first field at fault, in the order the fields are declared."""

    def values(self) -> dict[str, Any]:
        """The cleaned values; else the refusal of the first field at fault."""
        if self.is_valid():
            return self.cleaned_data
        name = next((name for name in self.fields if name in self.errors), "")
        message = str(self.errors[name][0]) if name else self.errors.as_text()
        kind = getattr(self.fields.get(name), "kind", message)
        raise ValidationFailed(message, details=[{"field": name or "form", "message": kind}])


# --- page input through the API's input serializer ----------------------------------------------
# A page posts strings; the API's serializers take JSON as typed. `form_input` types what a page
# posted by the serializer's own fields and validates with that same serializer, so one
# declaration checks (and the OpenAPI schema documents) the input of the API and of the page.

_TRUE = frozenset({"on", "true", "1", "yes"})
_FALSE = frozenset({"", "off", "false", "0", "no"})


def _typed(field: serializers.Field[Any, Any, Any, Any], text: str) -> Any:
    """`text` as the JSON value `field` takes, or the text itself when it is not one (the
    serializer then refuses it with its own words)."""
    stripped = text.strip()
    form_value = getattr(field, "form_value", None)
    if callable(form_value):  # a field of its own kind says how a page's text reads
        return form_value(text)
    if isinstance(field, serializers.BooleanField):
        lowered = stripped.lower()
        return True if lowered in _TRUE else False if lowered in _FALSE else text
    integer_choices = isinstance(field, serializers.ChoiceField) and any(
        isinstance(choice, int) and not isinstance(choice, bool) for choice in field.choices
    )
    if isinstance(field, serializers.IntegerField) or integer_choices:
        try:
            return int(stripped)
        except ValueError:
            return text
    if isinstance(field, serializers.FloatField):
        try:
            number = float(stripped)
        except ValueError:
            return text
        return number if math.isfinite(number) else text
    return text


def form_values(
    serializer_class: type[serializers.Serializer[Any]], posted: QueryDict
) -> dict[str, Any]:
    """What a page posted, typed for `serializer_class`: only its fields; a blank optional
    field is left out (its default applies); an unticked checkbox is `false`; a list field
    takes every value posted under its name."""
    data: dict[str, Any] = {}
    for name, field in serializer_class().fields.items():
        if field.read_only:
            continue
        if isinstance(field, serializers.BooleanField) and name not in posted:
            data[name] = False
            continue
        if name not in posted:
            continue
        if isinstance(field, serializers.ListField):
            data[name] = [_typed(field.child, text) for text in posted.getlist(name)]
            continue
        text = str(posted.get(name, ""))
        if not text.strip() and not field.required:
            continue
        data[name] = _typed(field, text)
    return data


def form_input(
    serializer_class: type[serializers.Serializer[Any]],
    posted: QueryDict,
    *,
    message: str = "",
) -> dict[str, Any]:
    """A page's posted form validated by the API's input serializer: the validated values, or
    one `ValidationFailed` whose message names the first field at fault (its label) and whose
    details name every problem, as the API's would."""
    serializer = serializer_class(data=form_values(serializer_class, posted))
    if serializer.is_valid():
        return dict(serializer.validated_data)
    details = drf_error_details(serializer.errors)
    first = details[0]
    field = serializer.fields.get(first["field"].split(".")[0].split("[")[0])
    label = field.label if field is not None and field.label else first["field"]
    message = message or f"{label[:1].upper()}{label[1:]}: {first['message']}"
    raise ValidationFailed(message, details=details)
