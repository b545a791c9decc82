"""Factories for tests, in one place. Fleets are made through the services, as users make them."""

from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from routing_policies.demo import demo_table
from routing_policies.models import Fleet
from routing_policies.roles import ROLE_GROUPS, Role
from routing_policies.services import fleet_create, policy_version_publish

PASSWORD = "test-password-123"


class UserFactory(factory.django.DjangoModelFactory):
    """A user with a password of PASSWORD; `role=Role.EDITOR` puts them in that group."""

    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def role(self, create: bool, extracted: Role | None, **kwargs: Any) -> None:
        if extracted:
            group, _ = Group.objects.get_or_create(name=ROLE_GROUPS[extracted])
            self.groups.add(group)
        self.save()


def make_fleet(*, slug: str = "fleet-a", actor: Any = None, publish: bool = True) -> Fleet:
    """A fleet with the demo's 12-cell table, published as v1 unless `publish=False`."""
    fleet = fleet_create(actor=actor, slug=slug, name=slug.title(), table=demo_table())
    if publish:
        policy_version_publish(actor=actor, fleet=fleet, revision=1, note="v1")
    return fleet
