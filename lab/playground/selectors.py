"""What the playground reads: a version's (or the draft's) cells as `edge_sdk` cells, and
sample tasks from the fleet's recorded telemetry."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from controlplane.exceptions import NotFound
from edge_sdk.decision import Cell, DeviceState, TaskSignals
from routing_policies.documents import cell_document, ordered_keys
from routing_policies.models import Fleet, PolicyVersion
from routing_policies.pricing import CloudPrice
from routing_policies.selectors import version_get, version_table
from telemetry.models import Event
from telemetry.rollups import Figures, plan_window, read_rows

from ..replay import SIGNAL_COLUMNS
from ..running import lab_version_default, running_versions
from .explain import (
    SEED_DEVICE_MS,
    CellKey,
    CellOverride,
    Sample,
    explain,
    matrix,
    sample_stream,
    seed_samples,
)

# How many recorded tasks the stream cycles through (the newest of the picked cell), and how
# far back it looks: the (fleet, ts) index read backwards, bounded so a cell without events
# does not scan the fleet's whole history.
RECORDED_SAMPLES = 60
RECORDED_LOOKBACK = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class LabTable:
    """A version of the fleet's policy, its cells ready for `decide`, in display order."""

    version: PolicyVersion
    dimensions: dict[str, list[str]]
    cells: dict[CellKey, Cell]

    @property
    def label(self) -> str:
        """`draft` or `v3`."""
        return "draft" if self.version.is_draft else f"v{self.version.number}"


def lab_versions(*, fleet: Fleet, shown: PolicyVersion | None = None) -> dict[str, Any]:
    """What the version picker offers: `versions` (published numbers, newest first),
    `has_draft`, `version_options` (value, label naming who runs it, selected) and `running`
    (what devices run, in words) with `shown_role` (who runs the version `shown`)."""
    versions = list(
        PolicyVersion.objects.filter(fleet=fleet).order_by(F("number").desc(nulls_first=True))
    )
    running = running_versions(fleet=fleet)
    options = []
    for version in versions:
        role = running.role_of(version)
        value = "draft" if version.is_draft else str(version.number)
        label = "draft" if version.is_draft else f"v{version.number}"
        if role:
            label = f"{label} · {running.short_role_of(version)}"
        selected = shown is not None and version.pk == shown.pk
        options.append({"value": value, "label": label, "selected": selected})
    return {
        "versions": [v.number for v in versions if v.number is not None],
        "has_draft": any(v.is_draft for v in versions),
        "version_options": options,
        "running": running.sentence(),
        "shown_role": running.role_of(shown) if shown is not None else "",
    }


def lab_table(*, fleet: Fleet, ref: int | str | None) -> LabTable:
    """The version `ref` (a number, `draft`, `latest`; None: the lab's default) with its
    cells; a 404 application error when the fleet has no such version."""
    version = (
        lab_version_default(fleet=fleet) if ref is None else version_get(fleet=fleet, ref=str(ref))
    )
    if version is None:
        version = version_get(fleet=fleet, ref="draft")  # raises the 404 naming the version
    table = version_table(version=version)
    cells = {
        key: Cell.from_document(cell_document(key, table[key]))
        for key in ordered_keys(version.dimensions)
        if key in table
    }
    return LabTable(version=version, dimensions=version.dimensions, cells=cells)


def recorded_samples(
    *, fleet: Fleet, key: CellKey, device: DeviceState, limit: int = RECORDED_SAMPLES
) -> list[Sample]:
    """The cell's newest recorded tasks that carry their signals, each on its recorded
    network and load; cloud pressure, cloud inference time and online come from `device`
    (the events do not all record them)."""
    rows = (
        Event.objects.filter(
            fleet_id=fleet.pk,
            ts__gte=timezone.now() - RECORDED_LOOKBACK,
            task_type=key[0],
            latency_budget=key[1],
            privacy_tier=key[2],
            tokens__isnull=False,
            intent_conf__isnull=False,
            lm_conf__isnull=False,
        )
        .order_by("-ts")
        .values_list(*SIGNAL_COLUMNS)[:limit]
    )
    samples = []
    for tokens, intent, lm, upload, rtt, bandwidth, load in rows:
        samples.append(
            Sample(
                # The query keeps only rows whose three signals are not null.
                task=TaskSignals(
                    tokens=int(tokens or 0),
                    intent_conf=float(intent or 0.0),
                    lm_conf=float(lm or 0.0),
                    upload_bytes=upload or 0,
                ),
                device=DeviceState(
                    rtt_ms=device.rtt_ms if rtt is None else rtt,
                    bandwidth_kbps=device.bandwidth_kbps if bandwidth is None else bandwidth,
                    device_load=device.device_load if load is None else load,
                    online=device.online,
                    cloud_infer_ms=device.cloud_infer_ms,
                    cloud_pressure=device.cloud_pressure,
                ),
                source="recorded",
            )
        )
    samples.reverse()  # oldest first: the stream plays them in the order they happened
    return samples


@dataclass(frozen=True, slots=True)
class ObservedDeviceLatency:
    """What a device answer took in the fleet's telemetry: the P50 and where it came from."""

    p50_ms: float
    answers: int
    source: str  # in words, for the page


def observed_device_latency(*, fleet: Fleet, key: CellKey) -> ObservedDeviceLatency | None:
    """The device route's P50 latency over the last 24 h of rollups (the dashboard's figure):
    the cell's own where it has device answers, else the fleet's; None when neither has."""
    end = timezone.now()
    plan = plan_window(RECORDED_LOOKBACK, now=end)
    rows = read_rows(
        plan.level(cell_level=True),
        fleet_id=fleet.pk,
        since=plan.start,
        until=end,
        where={"route": "device"},
        latency=True,
    )
    cell, whole = Figures(), Figures()
    for row in rows:
        whole.add(row, scores=False)
        if (row.task_type, row.latency_budget, row.privacy_tier) == key:
            cell.add(row, scores=False)
    hours = int(RECORDED_LOOKBACK.total_seconds() // 3600)
    for figures, whose in ((cell, f"{'/'.join(key)}'s"), (whole, "the fleet's")):
        (p50,) = figures.latency_quantiles([0.5])
        if p50 is not None:
            return ObservedDeviceLatency(
                p50_ms=p50,
                answers=figures.events,
                source=f"the device P50 of {whose} {figures.events:,} device answers "
                f"over the last {hours} h, as the dashboard shows it",
            )
    return None


def playground_explain(
    *,
    fleet: Fleet,
    ref: int | str | None,
    key: CellKey,
    override: CellOverride,
    task: TaskSignals,
    device: DeviceState,
    with_matrix: bool = False,
    samples: str = "none",
    device_ms: float | None = None,
) -> dict[str, Any]:
    """The explain API's answer: the task in the cell of version `ref` (after `override`),
    optionally in every cell, and optionally a stream of sample tasks in the cell.

    A version or cell the fleet does not have is a 404 naming the field (`version`, `cell`):
    the body is well formed, what it names is not there.
    """
    try:
        table = lab_table(fleet=fleet, ref=ref)
    except NotFound as exc:
        raise NotFound(
            exc.message, details=[{"field": "version", "message": "no such version"}]
        ) from None
    published = table.cells.get(key)
    if published is None:
        raise NotFound(
            f"{table.label} has no cell {'/'.join(key)}.",
            details=[{"field": "cell", "message": "no such cell in this version"}],
        )
    cell = override.apply(published)
    answer: dict[str, Any] = {
        "version": table.version.number,
        "version_label": table.label,
        "cell": {
            "task_type": key[0],
            "latency_budget": key[1],
            "privacy_tier": key[2],
            "mode": cell.mode,
            "threshold": cell.threshold,
            "overridden": cell != published,
        },
        **explain(cell=cell, task=task, device=device, price=CloudPrice.of_fleet(fleet)),
    }
    if with_matrix:
        answer["matrix"] = matrix(cells={**table.cells, key: cell}, task=task, device=device)
    if samples != "none":
        source = f"the seed's on-device latency ({SEED_DEVICE_MS:g} ms)"
        if device_ms is not None:
            source = "set in the request"
        if samples == "seed":
            stream = seed_samples(device, upload_bytes=task.upload_bytes)
        else:
            stream = recorded_samples(fleet=fleet, key=key, device=device)
            if device_ms is None:
                # Recorded tasks are the fleet's own: a device answer takes what the fleet's
                # devices took, not the seed's constant.
                observed = observed_device_latency(fleet=fleet, key=key)
                if observed is not None:
                    device_ms, source = observed.p50_ms, observed.source
                else:
                    source = (
                        f"no device answer in the last 24 h: the seed's on-device latency "
                        f"({SEED_DEVICE_MS:g} ms)"
                    )
        used = SEED_DEVICE_MS if device_ms is None else device_ms
        answer["samples"] = sample_stream(cell=cell, samples=stream, device_ms=used)
        answer["samples_device_ms"] = {"value": used, "source": source}
    return answer
