"""Guards, set by a person: guard an open rollout, or start a rollout guarded."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from controlplane.exceptions import Conflict
from routing_policies import services as rollout_services
from routing_policies.models import Rollout
from routing_policies.services import Actor, audit_record

from ...models import (
    RolloutGuard,
    RolloutGuardSet,
)
from .input import DEFAULT_BAKE_MINUTES, guard_set_clean


@transaction.atomic
def rollout_guards_set(
    *,
    actor: Actor,
    rollout: Rollout,
    guards: object = "default",
    bake_minutes: object = DEFAULT_BAKE_MINUTES,
    auto_advance: object = False,
    window_minutes: object = 10,
    min_samples: object = 50,
    min_devices: object = 0,
    min_events: object = 0,
    stage_limit_minutes: object = 0,
    max_extensions: object = 1,
    on_expiry: object = "rollback",
) -> RolloutGuardSet:
    """Guard an open rollout (replacing its guards, if any); the verdict starts afresh."""
    clean = guard_set_clean(
        guards=guards,
        bake_minutes=bake_minutes,
        auto_advance=auto_advance,
        window_minutes=window_minutes,
        min_samples=min_samples,
        min_devices=min_devices,
        min_events=min_events,
        stage_limit_minutes=stage_limit_minutes,
        max_extensions=max_extensions,
        on_expiry=on_expiry,
    )
    cleaned, bake = clean.guards, clean.bake_minutes
    locked = Rollout.objects.select_for_update().filter(pk=rollout.pk).first()
    if locked is None or not locked.is_open:
        raise Conflict("Only an open rollout can be guarded.", code="rollout_not_open")
    guard_set, _ = RolloutGuardSet.objects.update_or_create(
        rollout=locked,
        defaults={
            "window_minutes": clean.window_minutes,
            "bake_minutes": bake,
            "auto_advance": clean.auto_advance,
            "verdict": RolloutGuardSet.Verdict.WATCHING,
            "verdict_reason": "",
            "stage_seen": locked.stage,
            "quiet_since": None,
            "evaluated_at": None,
            "extensions_used": 0,
            "sample_ratios": {},
            **clean.exposure,
        },
    )
    guard_set.guards.all().delete()
    RolloutGuard.objects.bulk_create(RolloutGuard(guard_set=guard_set, **g) for g in cleaned)
    audit_record(
        actor=actor,
        action="rollout.guarded",
        fleet=locked.fleet,
        target=f"rollout {locked.pk}",
        summary=(
            f"Guarded rollout {locked.pk} with {len(cleaned)} guards, bake "
            f"{'/'.join(str(bake[str(s)]) for s in Rollout.STAGES)} min"
            f"{', auto-advance' if clean.auto_advance else ''}"
        ),
        after={
            "guards": cleaned,
            "bake_minutes": bake,
            "auto_advance": clean.auto_advance,
            "window_minutes": clean.window_minutes,
            **clean.exposure,
        },
    )
    return guard_set


@transaction.atomic
def rollout_start_guarded(
    *, actor: Actor, fleet: Any, version: int, guard_options: dict[str, Any], holdback: int = 0
) -> Rollout:
    """Start a rollout and, when `guard_options` is not empty, guard it, all or nothing."""
    rollout = rollout_services.rollout_start(
        actor=actor, fleet=fleet, version=version, holdback=holdback
    )
    if guard_options:
        rollout_guards_set(actor=actor, rollout=rollout, **guard_options)
    return rollout
