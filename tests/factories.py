"""Factories for tests, in one place: users and fleets (made through the services, as users
make them), and telemetry events as devices send them (PROTOCOL.md)."""

import uuid
from datetime import UTC, datetime, timedelta
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


def iso(moment: datetime) -> str:
    """RFC 3339 with milliseconds and Z, as the SDK writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def make_event(device_id: str = "phone-1", **overrides: Any) -> dict[str, Any]:
    """A valid event of `device_id` (fleet on v1, cell text/interactive/normal, on device)."""
    event: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "device_id": device_id,
        "ts": iso(datetime.now(UTC) - timedelta(seconds=1)),
        "policy_version": 1,
        "task_type": "text",
        "latency_budget": "interactive",
        "privacy_tier": "normal",
        "route": "device",
        "decided_by": "threshold",
        "score": 0.42,
        "threshold": 0.6,
        "tokens": 180,
        "intent_conf": 0.85,
        "lm_conf": 0.72,
        "latency_ms": 35.2,
        "fallback": "none",
        "cache_hit": False,
        "upload_bytes": 0,
        "rtt_ms": 80,
        "bandwidth_kbps": 5000,
        "device_load": 0.3,
        "ok": True,
        "deidentified": False,
    }
    event.update(overrides)
    return event


def make_events(count: int, device_id: str = "phone-1", **overrides: Any) -> list[dict[str, Any]]:
    """`count` valid events with distinct ids."""
    return [make_event(device_id, **overrides) for _ in range(count)]
