"""What the alert services' refusals share: a `details` entry naming a field, and a unique
constraint's refusal as a 409."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import IntegrityError, transaction

from controlplane.exceptions import Conflict

Written = TypeVar("Written")


def field_problem(field_name: str, message: str) -> dict[str, str]:
    """One entry of a refusal's `details` (`ValidationFailed`, `Conflict`)."""
    return {"field": field_name, "message": message}


def unique_or_conflict(
    write: Callable[[], Written], *, message: str, code: str, field: str, problem: str
) -> Written:
    """`write` in a savepoint; when it breaks a unique constraint (which decides, not a read
    before it), a 409 naming `field`, nothing written."""
    try:
        with transaction.atomic():
            return write()
    except IntegrityError:
        raise Conflict(message, code=code, details=[field_problem(field, problem)]) from None
