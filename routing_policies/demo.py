"""The demo fleet of `make run`: a voice assistant's 12-cell table, as in the seed article."""

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.roles import ROLE_GROUPS, Role, ensure_role_groups

from .cell_schema import DEFAULT_CELL_VALUES, SEED_DIMENSIONS
from .devices.services import fleet_enrollment_key_rotate
from .documents import Table, ordered_keys
from .extensions import demo_seeders
from .policies.models import Fleet
from .policies.services import fleet_create, policy_version_publish
from .rollouts.models import FleetRouting
from .segments.models import Segment
from .segments.rules import RULE_EXAMPLES
from .segments.services import segment_create

DEMO_FLEET = "voice-assistant-android"
# The demo fleet's enrolment key, fixed so the simulated fleet of `make run` can enrol. Real
# fleets get a random key from `fleet_enrollment_key_rotate`, shown once.
DEMO_FLEET_KEY = "fk_demo_voice_assistant_android"
DEMO_USERS: dict[str, tuple[Role | None, str]] = {
    "viewer": (Role.VIEWER, "demo-viewer"),
    "editor": (Role.EDITOR, "demo-editor"),
    "publisher": (Role.PUBLISHER, "demo-publisher"),
    "admin": (None, "demo-admin"),  # superuser: Django admin as well
}

_LOCAL_ONLY = {"mode": "device_only", "upload.allowed": False, "upload.deidentify": True}
# (task_type, latency_budget, privacy_tier) -> overrides of the seed's auto cell.
DEMO_OVERRIDES: dict[tuple[str, str, str], dict[str, Any]] = {
    # A voice assistant with biometrics: voiceprints never leave the device.
    ("voice", "interactive", "sensitive"): {
        **_LOCAL_ONLY,
        "latency_budget_ms": 300,
        "cloud_timeout_ms": 800,
    },
    ("voice", "interactive", "normal"): {
        "threshold": 0.65,
        "latency_budget_ms": 300,
        "cloud_timeout_ms": 800,
        "cache_ttl_s": 600,
    },
    ("voice", "background", "sensitive"): {
        **_LOCAL_ONLY,
        "latency_budget_ms": 5000,
        "cloud_timeout_ms": 8000,
    },
    ("voice", "background", "normal"): {"latency_budget_ms": 5000, "cloud_timeout_ms": 8000},
    # Text sits in between: auto with θ 0.6 and weights 0.4/0.3/0.3 over 400 tokens.
    ("text", "interactive", "sensitive"): {"latency_budget_ms": 1000, "cloud_timeout_ms": 1500},
    ("text", "interactive", "normal"): {"latency_budget_ms": 1000, "cloud_timeout_ms": 1500},
    ("text", "background", "sensitive"): {"latency_budget_ms": 10000, "cloud_timeout_ms": 15000},
    ("text", "background", "normal"): {"latency_budget_ms": 10000, "cloud_timeout_ms": 15000},
    ("image", "interactive", "sensitive"): {
        **_LOCAL_ONLY,
        "latency_budget_ms": 1000,
        "cloud_timeout_ms": 2000,
    },
    ("image", "interactive", "normal"): {
        "mode": "draft_refine",
        "latency_budget_ms": 2500,
        "cloud_timeout_ms": 4000,
        "upload.max_bytes": 2_097_152,
    },
    ("image", "background", "sensitive"): {
        "latency_budget_ms": 15000,
        "cloud_timeout_ms": 30000,
        "upload.max_bytes": 4_194_304,
    },
    # Background, non-sensitive long work goes to the big model.
    ("image", "background", "normal"): {
        "mode": "cloud_only",
        "latency_budget_ms": 20000,
        "cloud_timeout_ms": 30000,
        "upload.deidentify": False,
        "upload.max_bytes": 8_388_608,
    },
}


def demo_table() -> Table:
    """The demo's 12 cells."""
    return {
        key: {**DEFAULT_CELL_VALUES, **DEMO_OVERRIDES.get(key, {})}
        for key in ordered_keys(SEED_DIMENSIONS)
    }


@transaction.atomic
def demo_seed() -> list[str]:
    """Create the demo users and fleet (published as v1) if missing; return what was created."""
    created: list[str] = []
    groups = ensure_role_groups()
    user_model = get_user_model()
    for username, (role, password) in DEMO_USERS.items():
        user, was_created = user_model.objects.get_or_create(username=username)
        if was_created:
            user.set_password(password)
            if role is None:
                user.is_superuser = user.is_staff = True
            user.save()
            if role is not None:
                user.groups.add(groups[role])
            created.append(f"user {username}")
    if not Fleet.objects.filter(slug=DEMO_FLEET).exists():
        publisher = user_model.objects.get(username="publisher")
        fleet = fleet_create(
            actor=publisher,
            slug=DEMO_FLEET,
            name="Voice assistant (Android)",
            description="Demo fleet: phones running a 3B on-device model with a 70B cloud model.",
            dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
            table=demo_table(),
        )
        policy_version_publish(
            actor=publisher, fleet=fleet, revision=1, note="Initial policy from the design article"
        )
        created.append(f"fleet {DEMO_FLEET} v1")
    fleet = Fleet.objects.get(slug=DEMO_FLEET)
    if not FleetRouting.objects.filter(fleet=fleet).exclude(enrollment_key_hash="").exists():
        fleet_enrollment_key_rotate(actor=None, fleet=fleet, key=DEMO_FLEET_KEY)
        created.append(f"enrolment key {DEMO_FLEET_KEY}")
    if not Segment.objects.filter(fleet=fleet).exists():
        # The simulated fleet reports its attributes (docs/simulator.md): segments to count.
        editor = user_model.objects.get(username="editor")
        for name, (description, rule) in zip(
            ("npu-android-14", "small-models"), RULE_EXAMPLES[:2], strict=False
        ):
            segment_create(actor=editor, fleet=fleet, name=name, description=description, rule=rule)
        created.append("segments npu-android-14, small-models")
    # What other apps add to the demo (telemetry: its alert rules, docs/alerts.md).
    for seed in demo_seeders():
        created.extend(seed(fleet))
    return created


DEMO_ROLE_NAMES = {
    name: (ROLE_GROUPS[role] if role else "superuser") for name, (role, _) in DEMO_USERS.items()
}
