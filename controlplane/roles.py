"""Roles, enforced identically by pages and the API.

viewer reads; editor also edits drafts; publisher also publishes (and later rolls out and back).
A role is membership of the Django group of that name; superusers are publishers.
"""

from enum import IntEnum
from typing import Any

from django.contrib.auth.models import Group


class Role(IntEnum):
    """Roles in increasing power; a higher role has every right of the lower ones."""

    NONE = 0
    VIEWER = 1
    EDITOR = 2
    PUBLISHER = 3

    @property
    def label(self) -> str:
        """Lower-case name, as used for the group."""
        return self.name.lower()

    @property
    def with_article(self) -> str:
        """`a viewer`, `an editor`: the label as a sentence says it."""
        return f"{'an' if self.label[0] in 'aeiou' else 'a'} {self.label}"


ROLE_GROUPS = {Role.VIEWER: "viewer", Role.EDITOR: "editor", Role.PUBLISHER: "publisher"}


def user_role(user: Any) -> Role:
    """The highest role the user holds (cached on the user object for the request)."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return Role.NONE
    cached = getattr(user, "_policy_role", None)
    if cached is not None:
        return Role(cached)
    if user.is_superuser:
        role = Role.PUBLISHER
    else:
        names = set(user.groups.values_list("name", flat=True))
        role = max((r for r, name in ROLE_GROUPS.items() if name in names), default=Role.NONE)
    user._policy_role = int(role)
    return role


def has_role(user: Any, role: Role) -> bool:
    """True when the user holds `role` or a higher one."""
    return user_role(user) >= role


def ensure_role_groups() -> dict[Role, Group]:
    """Create the three role groups if missing (used by migrations-free setups and the seed)."""
    return {role: Group.objects.get_or_create(name=name)[0] for role, name in ROLE_GROUPS.items()}
