"""Roles: a user's role comes from their groups; superusers publish; inactive users have none."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, Group

from controlplane.roles import Role, ensure_role_groups, has_role, user_role

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", [Role.VIEWER, Role.EDITOR, Role.PUBLISHER])
def test_user_role__member_of_role_group__has_that_role(
    make_user: Callable[..., Any], role: Role
) -> None:
    # Given a user in the group of one role
    user = make_user(role)

    # When their role is read
    # Then it is that role
    assert user_role(user) == role


def test_user_role__several_groups__highest_role(make_user: Callable[..., Any]) -> None:
    # Given a viewer who was also made publisher
    user = make_user(Role.VIEWER)
    user.groups.add(Group.objects.get_or_create(name="publisher")[0])

    # When their role is read
    # Then the higher role counts
    assert user_role(user) == Role.PUBLISHER


def test_user_role__no_group_or_unrelated_group__none(make_user: Callable[..., Any]) -> None:
    # Given a user in no group and one in a group that is not a role
    nobody = make_user(None)
    staff_only = make_user(None)
    staff_only.groups.add(Group.objects.create(name="support"))

    # When / Then neither has a role
    assert user_role(nobody) == Role.NONE
    assert user_role(staff_only) == Role.NONE


def test_user_role__superuser_without_groups__publisher(make_user: Callable[..., Any]) -> None:
    # Given a superuser in no group
    admin = make_user(None, is_superuser=True, is_staff=True)

    # When / Then they are a publisher
    assert user_role(admin) == Role.PUBLISHER


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"role": Role.PUBLISHER}, id="publisher-group"),
        pytest.param({"is_superuser": True}, id="superuser"),
    ],
)
def test_user_role__inactive_user__none(
    make_user: Callable[..., Any], kwargs: dict[str, Any]
) -> None:
    # Given a deactivated publisher (or superuser)
    user = make_user(is_active=False, **kwargs)

    # When / Then they hold no role at all
    assert user_role(user) == Role.NONE
    assert not has_role(user, Role.VIEWER)


@pytest.mark.parametrize("user", [AnonymousUser(), None], ids=["anonymous", "none"])
def test_user_role__anonymous__none(user: Any) -> None:
    # Given nobody logged in
    # When / Then there is no role
    assert user_role(user) == Role.NONE
    assert not has_role(user, Role.VIEWER)


@pytest.mark.parametrize(
    ("role", "can_read", "can_edit", "can_publish"),
    [
        (Role.VIEWER, True, False, False),
        (Role.EDITOR, True, True, False),
        (Role.PUBLISHER, True, True, True),
    ],
)
def test_has_role__each_role__holds_the_rights_of_lower_roles_only(
    make_user: Callable[..., Any], role: Role, can_read: bool, can_edit: bool, can_publish: bool
) -> None:
    # Given a user of one role
    user = make_user(role)

    # When / Then they hold exactly their role and those below it
    assert has_role(user, Role.VIEWER) is can_read
    assert has_role(user, Role.EDITOR) is can_edit
    assert has_role(user, Role.PUBLISHER) is can_publish


def test_ensure_role_groups__called_twice__three_groups_once_each() -> None:
    # Given no groups
    # When the role groups are ensured twice (migrations-free setups, the demo seed)
    first = ensure_role_groups()
    second = ensure_role_groups()

    # Then viewer, editor and publisher exist once each
    assert first == second
    assert sorted(Group.objects.values_list("name", flat=True)) == [
        "editor",
        "publisher",
        "viewer",
    ]
