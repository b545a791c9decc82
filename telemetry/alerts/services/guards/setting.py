"""Guards, set by a person: guard an open rollout, or start a rollout guarded."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from controlplane.exceptions import Conflict
from routing_policies import services as rollout_services
from routing_policies.extensions import GuardedStart
from routing_policies.models import Rollout
from routing_policies.services import Actor, audit_of

from ...guard_fields import DEFAULT_PRESET, preset_guards
from ...limits import DEFAULT_BAKE_MINUTES
from ...models import RolloutGuard, RolloutGuardSet
from .input import bake_every_stage, guard_options_validate, guard_row


@transaction.atomic
def rollout_guards_set(
    *,
    actor: Actor,
    rollout: Rollout,
    guards: list[dict[str, Any]] | None = None,
    bake_minutes: dict[str, int] | None = None,
    auto_advance: bool = False,
    window_minutes: int = 10,
    min_samples: int = 50,
    min_devices: int = 0,
    min_events: int = 0,
    stage_limit_minutes: int = 0,
    max_extensions: int = 1,
    on_expiry: str = RolloutGuardSet.OnExpiry.ROLLBACK.value,
) -> RolloutGuardSet:
    """Guard an open rollout (replacing its guards, if any), the options as the input
    serializer (`guard_options_validate`) took them (no guards: the default preset; no bake
    time: the default at every stage); the verdict starts afresh."""
    checked = guards if guards is not None else preset_guards(DEFAULT_PRESET)
    cleaned = [guard_row(guard, min_samples=min_samples) for guard in checked]
    bake = bake_minutes if bake_minutes is not None else bake_every_stage(DEFAULT_BAKE_MINUTES)
    locked = Rollout.objects.select_for_update().filter(pk=rollout.pk).first()
    if locked is None or not locked.is_open:
        raise Conflict("Only an open rollout can be guarded.", code="rollout_not_open")
    settings = {
        "window_minutes": window_minutes,
        "bake_minutes": bake,
        "auto_advance": auto_advance,
        "min_devices": min_devices,
        "min_events": min_events,
        "stage_limit_minutes": stage_limit_minutes,
        "max_extensions": max_extensions,
        "on_expiry": on_expiry,
    }
    guard_set, _ = RolloutGuardSet.objects.update_or_create(
        rollout=locked,
        defaults={
            **settings,
            "verdict": RolloutGuardSet.Verdict.WATCHING,
            "verdict_reason": "",
            "stage_seen": locked.stage,
            "quiet_since": None,
            "evaluated_at": None,
            "extensions_used": 0,
            "sample_ratios": {},
        },
    )
    guard_set.guards.all().delete()
    RolloutGuard.objects.bulk_create(RolloutGuard(guard_set=guard_set, **g) for g in cleaned)
    audit_of(
        "rollout",
        locked.pk,
        "guarded",
        actor=actor,
        fleet=locked.fleet,
        summary=(
            f"Guarded rollout {locked.pk} with {len(cleaned)} guards, bake "
            f"{'/'.join(str(bake[str(s)]) for s in Rollout.STAGES)} min"
            f"{', auto-advance' if auto_advance else ''}"
        ),
        after={"guards": cleaned, **settings},
    )
    return guard_set


@transaction.atomic
def _start_guarded(*, actor: Actor, guard_options: dict[str, Any], **start: Any) -> Rollout:
    """Start a rollout and, when `guard_options` is not empty, guard it, all or nothing. The
    options come from another part (routing_policies.extensions) as sent: the input serializer
    checks them before anything starts."""
    options = guard_options_validate(guard_options) if guard_options else {}
    rollout = rollout_services.rollout_start(actor=actor, **start)
    if guard_options:
        rollout_guards_set(actor=actor, rollout=rollout, **options)
    return rollout


# Its arguments as the extension point declares them (routing_policies.extensions.GuardedStart).
rollout_start_guarded: GuardedStart = _start_guarded
