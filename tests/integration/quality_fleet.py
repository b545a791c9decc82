"""The simulated fleet the device-quality tests (issue #15) run, on the simulator's virtual clock.

The simulator's own devices and the SDK's own routing, refines, shadow refines and feedback
queue (`edge_sdk.simulate.virtual.VirtualFleet`) run minutes of a fleet's life in seconds; at
every step their telemetry and feedback batches go through the control plane's real ingest
and feedback services (landed at that simulated moment), are processed into rollups, held
feedback is swept into them, and the fleet's rules and guards can be judged at that moment as
Celery beat judges them (as tests/integration/test_steady_demo.py does).

A fleet of ONE cell (text/interactive/normal: its dimensions have one value each) gives every
task to the cell under test, so the statistical tests need no traffic they do not measure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from django.utils import timezone

from edge_sdk.simulate.fleet import FleetConfig
from edge_sdk.simulate.virtual import VirtualFleet
from routing_policies.demo import demo_table
from routing_policies.models import Device, Fleet, PolicyVersion, Rollout
from routing_policies.selectors import version_document
from routing_policies.services import (
    device_enroll,
    devices_ack,
    fleet_create,
    fleet_enrollment_key_rotate,
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
)
from telemetry.feedback.services import feedback_batch_ingest, feedback_sweep
from telemetry.ingest.services import landed_batches_process, telemetry_batch_ingest

CELL = ("text", "interactive", "normal")
CELL_FIELDS = dict(zip(("task_type", "latency_budget", "privacy_tier"), CELL, strict=True))
ONE_CELL_DIMENSIONS = {name: [value] for name, value in CELL_FIELDS.items()}


def one_cell_fleet(*, actor: Any, slug: str, values: Mapping[str, Any]) -> Fleet:
    """A fleet of the one cell (the demo's values, with `values` over them), published as v1."""
    table = {CELL: {**demo_table()[CELL], **values}}
    fleet = fleet_create(
        actor=actor, slug=slug, name=slug.title(), dimensions=ONE_CELL_DIMENSIONS, table=table
    )
    policy_version_publish(actor=actor, fleet=fleet, revision=1, note="v1")
    return fleet


def publish_cell(*, actor: Any, fleet: Fleet, values: Mapping[str, Any], note: str) -> int:
    """A new draft of the latest version with the cell's `values` changed, published; its
    number (the stable version does not move)."""
    draft = policy_draft_create(actor=actor, fleet=fleet)
    policy_draft_update_cells(
        actor=actor,
        fleet=fleet,
        revision=draft.revision,
        edits=[{**CELL_FIELDS, "values": dict(values)}],
    )
    version = policy_version_publish(
        actor=actor, fleet=fleet, revision=draft.revision + 1, note=note
    )
    assert version.number is not None
    return version.number


def document_of(fleet: Fleet, number: int) -> dict[str, Any]:
    """The policy document devices receive for version `number`."""
    return dict(version_document(version=PolicyVersion.objects.get(fleet=fleet, number=number)))


def fleet_config(**overrides: Any) -> FleetConfig:
    """The virtual fleet's configuration: no server, every device online throughout."""
    values: dict[str, Any] = {
        "base_url": "http://127.0.0.1:9",
        "fleet_key": "virtual",
        "devices": 200,
        "rate": 100.0,
        "connect_per_s": 1e9,
        "progress_s": 1e9,
        "offline_spells": False,
    }
    return FleetConfig(**{**values, **overrides})


class VirtualRun:
    """A virtual fleet enrolled in `fleet`, delivering to the real ingest and feedback services.

    Virtual second 0 is `seconds` (the planned length of the run) plus a minute before now, so
    no event is from the future when it is landed. Every event and feedback item the devices
    sent is kept (`events`, `feedback`), decoded, for the tests' own arithmetic.
    """

    def __init__(
        self,
        *,
        fleet: Fleet,
        actor: Any,
        config: FleetConfig,
        document: Mapping[str, Any],
        seconds: float,
        keep: Iterable[str] = (),
    ) -> None:
        start = (timezone.now() - timedelta(seconds=seconds + 60)).replace(microsecond=0)
        self.sim = VirtualFleet(config, document, wall_start=start.timestamp())
        fleet_key = fleet_enrollment_key_rotate(actor=actor, fleet=fleet)
        for device_id, sim in self.sim.fleet.devices.items():
            device_enroll(fleet_key=fleet_key, device_id=device_id, platform=sim.profile.platform)
        self.devices = {d.device_id: d for d in Device.objects.filter(fleet=fleet)}
        self.versions = dict.fromkeys(self.devices, int(document["version"]))
        self.keep = tuple(keep)  # event fields kept beside the cell, route and score
        self.events: list[dict[str, Any]] = []
        self.feedback: list[dict[str, Any]] = []
        self.feedback_batches: list[tuple[str, bytes]] = []

    def now(self) -> datetime:
        """The simulated moment the virtual clock stands at."""
        return datetime.fromtimestamp(self.sim.wall_time(), UTC)

    def apply(self, document: Mapping[str, Any], device_ids: Iterable[str]) -> None:
        """Give these devices another policy document (as a push would; acked at the next
        step)."""
        for device_id in device_ids:
            self.sim.fleet.devices[device_id].device.policy.apply(document, save=False)
            self.versions[device_id] = int(document["version"])

    def step(self, seconds: float) -> None:
        """Run `seconds` of virtual time, then land and process what the devices sent."""
        batches = self.sim.advance(seconds)
        now = self.now()
        for device_id, body in batches:
            telemetry_batch_ingest(device=self.devices[device_id], body=body, now=now)
            for event in msgspec.json.decode(body)["events"]:
                self.events.append(
                    {
                        name: event.get(name)
                        for name in (
                            "event_id",
                            "device_id",
                            "policy_version",
                            "route",
                            "score",
                            "cache_hit",
                            "refine_changed",
                            "shadow_refine",
                            *self.keep,
                        )
                    }
                )
        # Feedback after the telemetry of the same step, as the SDK sends it.
        for device_id, body in self.sim.take_feedback():
            feedback_batch_ingest(device=self.devices[device_id], body=body, now=now)
            self.feedback_batches.append((device_id, body))
            self.feedback.extend(msgspec.json.decode(body)["feedback"])
        while landed_batches_process().batches:
            pass
        # The worker's sweep: feedback whose event was folded before the feedback came.
        while feedback_sweep():
            pass
        # What the push tier records of connected devices: the version each applied, seen now
        # (the guards' sample ratio checks count the devices by it).
        devices_ack(
            acks=[(self.devices[d].pk, version, now) for d, version in self.versions.items()]
        )

    def close(self) -> None:
        self.sim.close()


def rollout_backdated(rollout: Rollout, moment: datetime, *, stage_only: bool = False) -> None:
    """Date the rollout's start (unless `stage_only`) and its stage's at `moment`, the
    simulated moment it started or changed stage.

    The virtual clock runs behind the real one (its events must not be from the future), and
    ingest attributes an event to the candidate cohort by the event's own time: a rollout
    stamped with the real now would leave every virtual event before it, in stable.
    """
    dates = {"stage_changed_at": moment} if stage_only else {"started_at": moment}
    Rollout.objects.filter(pk=rollout.pk).update(**{"stage_changed_at": moment, **dates})
    rollout.refresh_from_db()
