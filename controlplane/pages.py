"""What every server-rendered page shares: the role check, page input through Django forms,
and showing a refused change on the page it came from. (The fleet a page's URL names is
`routing_policies.policies.pages.fleet_or_404`: the shared layer reads no part.)"""

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from controlplane.exceptions import ApplicationError, ValidationFailed
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


class NumberField(WholeNumberField):
    """A finite number typed into a page (`nan` and `inf` are refused)."""

    kind = "a number"

    def parse(self, text: str) -> float:
        number = float(text)
        if not math.isfinite(number):
            raise ValueError(text)
        return number


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
