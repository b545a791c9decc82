"""The simulated fleet on a virtual clock: minutes of a fleet's life in seconds.

`VirtualFleet` runs the simulator's own devices (`SimDevice`: device profiles, links, loads,
the shared cloud queue, the task mix) and the SDK's own `Device.run` (routing, fallback, cloud
timeouts, cache, telemetry events) on an asyncio loop whose clock is virtual: when every task
is waiting, the loop jumps to the next timer instead of sleeping. A modelled 300 ms cloud call
takes no real time, and the SDK times it, stamps its event and enforces the cell's timeout
with that clock.

What it does not do is talk to a server: devices get their policy document from the caller
(no enrolment, no socket), and each device's telemetry batches are handed to the caller
(`advance` returns them) to deliver, e.g. through the control plane's ingest service. The
late quality feedback the simulated app gives (`FleetConfig.feedback_share`) is collected the
same way (`take_feedback`: bodies of `POST /api/v1/telemetry/feedback`). A task held while
offline (a cloud-bound background task) stays held, as nothing reconnects.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Mapping
from typing import Any

import msgspec

from ..telemetry import Poster, PostResult
from .fleet import FleetConfig, SimulatedFleet

__all__ = ["VirtualEventLoop", "VirtualFleet"]


class _Clock:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class _VirtualSelector(selectors.DefaultSelector):
    """Never blocks: with nothing ready, the wait the loop asked for passes at once."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("the virtual loop would wait forever: nothing is scheduled")
        self._clock.now += timeout
        return []


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is virtual seconds since it was made (starting at 0)."""

    def __init__(self) -> None:
        self._virtual = _Clock()
        super().__init__(_VirtualSelector(self._virtual))

    def time(self) -> float:
        return self._virtual.now


class VirtualFleet:
    """A `SimulatedFleet`'s devices running `document` on a virtual clock.

    `wall_start` is the Unix time virtual second 0 stands for (events are stamped from it).
    """

    def __init__(
        self, config: FleetConfig, document: Mapping[str, Any], *, wall_start: float
    ) -> None:
        self.loop = VirtualEventLoop()
        self.wall_start = wall_start
        self.fleet = SimulatedFleet(config, clock=self.loop.time, wall_clock=self.wall_time)
        self._posted: list[tuple[str, bytes]] = []
        self._feedback: list[tuple[str, bytes]] = []
        self.fleet.create_devices()
        for sim in self.fleet.devices.values():
            sim.device.policy.apply(document, save=False)
            sim.device.telemetry.poster = self._poster(sim.device_id)
            sim.device.feedback_queue.poster = self._poster(sim.device_id, feedback=True)
        self.loop.run_until_complete(self._start())

    async def _start(self) -> None:
        for sim in self.fleet.devices.values():
            sim.start_tasks()

    def wall_time(self) -> float:
        """The Unix time the virtual clock stands at now."""
        return self.wall_start + self.loop.time()

    def _poster(self, device_id: str, *, feedback: bool = False) -> Poster:
        key = "feedback" if feedback else "events"

        async def post(body: bytes) -> PostResult:
            # Handed to the caller, who delivers it (its answer is the caller's to check).
            (self._feedback if feedback else self._posted).append((device_id, body))
            accepted = len(msgspec.json.decode(body)[key])
            return 202, msgspec.json.encode({"accepted": accepted, "duplicates": 0}), None

        return post

    def take_feedback(self) -> list[tuple[str, bytes]]:
        """The feedback batches posted since the last call, as (device id, body of
        `POST /api/v1/telemetry/feedback`), after the telemetry `advance` returned."""
        posted, self._feedback = self._feedback, []
        return posted

    def advance(self, seconds: float) -> list[tuple[str, bytes]]:
        """Run the fleet for `seconds` of virtual time, then flush every device's telemetry:
        the batches posted meanwhile, as (device id, body of `POST /api/v1/telemetry`)."""
        self.loop.run_until_complete(self._advance(seconds))
        posted, self._posted = self._posted, []
        return posted

    async def _advance(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        for sim in self.fleet.devices.values():
            await sim.device.telemetry.flush()
            await sim.device.feedback_queue.flush()

    def close(self) -> None:
        """Stop the devices' tasks and close the loop."""

        async def stop() -> None:
            sims = self.fleet.devices.values()
            await asyncio.gather(*(sim.stop_tasks() for sim in sims))
            await asyncio.gather(*(sim.device.cancel_shadow_refines() for sim in sims))
            await self.fleet.http.aclose()

        self.loop.run_until_complete(stop())
        self.loop.close()
