"""One measured fleet in its own process: the simulator, or the bare baseline.

    python -m bench.sim.worker --mode sim|bare --url http://127.0.0.1:PORT --devices N
        --rate-per-device R --measure S

Starts N devices, waits until every one is connected, lets them settle, then measures this
process's CPU time (user + system) over S seconds of steady work, and prints one JSON line.

- `sim`: `edge_sdk.simulate.SimulatedFleet` in the steady scenario: the SDK's `Device`
  (socket, routing, cache, fallback, telemetry queue) driven by the simulator's models.
- `bare`: the same number of devices doing the same network I/O with nothing else: a bare
  `websockets` socket each (hello, policy, ack, then held open), Poisson tasks at the same rate
  that sleep a latency drawn from the same device model, and one telemetry event per task
  POSTed in batches on the same interval through one shared `httpx.AsyncClient`.
"""

import argparse
import asyncio
import json
import math
import random
import resource
import sys
import time
from collections import Counter
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake

from edge_sdk.simulate.fleet import FleetConfig, SimulatedFleet
from edge_sdk.simulate.models import DEVICE_PROFILES, device_infer_ms

FLUSH_S = 2.0
CONNECT_TIMEOUT_S = 120.0
SETTLE_S = 3.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class BareDevice:
    """A device with nothing but its socket, its task timer and a list of events."""

    def __init__(self, index: int, url: str, http: httpx.AsyncClient, rate: float) -> None:
        self.device_id = f"bare-{index:06d}"
        self.url = url
        self.http = http
        self.rate = rate
        self.rng = random.Random(index)
        self.profile = DEVICE_PROFILES[index % len(DEVICE_PROFILES)]
        self.events: list[dict[str, Any]] = []
        self.connected = False
        self.tasks_done = 0
        self.token = ""
        self.socket: ClientConnection | None = None

    async def start(self) -> None:
        response = await self.http.post(
            f"{self.url}/api/v1/devices/enroll",
            json={"fleet_key": "fk_bench", "device_id": self.device_id, "platform": "android"},
        )
        self.token = response.json()["device_token"]
        self.socket = await connect(
            self.url.replace("http://", "ws://") + "/ws/device/",
            additional_headers={"Authorization": f"Bearer {self.token}"},
            compression=None,
            ping_interval=None,
            proxy=None,
        )
        await self.socket.send(json.dumps({"type": "hello", "device_id": self.device_id}))
        policy = json.loads(await self.socket.recv())
        await self.socket.send(json.dumps({"type": "ack", "version": policy["version"]}))
        self.connected = True

    async def hold(self) -> None:
        assert self.socket is not None
        async for _ in self.socket:
            pass

    async def work(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.rng.expovariate(self.rate)
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            started = time.perf_counter()
            await asyncio.sleep(device_infer_ms(self.profile, "text", 100, 0.3, self.rng) / 1000)
            self.events.append(
                {
                    "device_id": self.device_id,
                    "ts": time.time(),
                    "latency_ms": (time.perf_counter() - started) * 1000,
                }
            )
            self.tasks_done += 1
            next_at = max(next_at + self.rng.expovariate(self.rate), loop.time())

    async def flush(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            if self.events:
                batch, self.events = self.events, []
                headers = {"Authorization": f"Bearer {self.token}"}
                await self.http.post(
                    f"{self.url}/api/v1/telemetry", json={"events": batch}, headers=headers
                )


async def _measure(
    count_connected: Any, count_tasks: Any, devices: int, measure_s: float
) -> dict[str, Any]:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while count_connected() < devices and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    connected = count_connected()
    await asyncio.sleep(SETTLE_S)
    cpu0, wall0, tasks0 = _cpu_s(), time.monotonic(), count_tasks()
    await asyncio.sleep(measure_s)
    cpu1, wall1, tasks1 = _cpu_s(), time.monotonic(), count_tasks()
    return {
        "devices": devices,
        "connected": connected,
        "connected_at_end": count_connected(),
        "cpu_s": cpu1 - cpu0,
        "wall_s": wall1 - wall0,
        "cores": (cpu1 - cpu0) / (wall1 - wall0),
        "tasks_per_s": (tasks1 - tasks0) / (wall1 - wall0),
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


async def run_sim(
    url: str, devices: int, rate: float, measure_s: float, connect_per_s: float
) -> dict[str, Any]:
    fleet = SimulatedFleet(
        FleetConfig(
            base_url=url,
            fleet_key="fk_bench",
            devices=devices,
            rate=rate * devices,
            connect_per_s=connect_per_s,
            progress_s=math.inf,
            offline_spells=False,  # every device connected throughout, as the bare ones
            http_connections=100,
        )
    )
    await fleet.start()
    try:
        result = await _measure(
            lambda: fleet.connection_states()["connected"],
            lambda: fleet.stats.finished,
            devices,
            measure_s,
        )
        # Why a device is not connected, if one is not.
        result["states"] = dict(fleet.connection_states())
        result["errors"] = Counter(
            str(sim.device.last_error)
            for sim in fleet.devices.values()
            if sim.device.connection_state != "connected"
        ).most_common(3)
        result["reconnects"] = sum(sim.device.reconnects for sim in fleet.devices.values())
        return result
    finally:
        await fleet.stop(drain_s=10)


async def run_bare(
    url: str, devices: int, rate: float, measure_s: float, connect_per_s: float
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(limits=limits, timeout=30, trust_env=False) as http:
        bare = [BareDevice(i, url, http, rate) for i in range(devices)]
        loops: list[asyncio.Task[None]] = []

        async def start_one(device: BareDevice) -> None:
            while True:  # retried as the SDK retries (a refused or timed-out connect)
                try:
                    await device.start()
                    break
                except (OSError, TimeoutError, httpx.HTTPError, InvalidHandshake):
                    await asyncio.sleep(1.0)
            loops.extend(
                asyncio.create_task(c) for c in (device.hold(), device.work(), device.flush())
            )

        async def start_all() -> None:
            # Staggered as the simulator starts its devices, none awaited.
            for device in bare:
                await asyncio.sleep(1 / connect_per_s)
                loops.append(asyncio.create_task(start_one(device)))

        starter = asyncio.create_task(start_all())
        try:
            return await _measure(
                lambda: sum(d.connected for d in bare),
                lambda: sum(d.tasks_done for d in bare),
                devices,
                measure_s,
            )
        finally:
            starter.cancel()
            for task in loops:
                task.cancel()
            for device in bare:
                if device.socket is not None:
                    await device.socket.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["sim", "bare"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--rate-per-device", type=float, required=True)
    parser.add_argument("--measure", type=float, default=20.0)
    parser.add_argument("--connect-rate", type=float, default=100.0)
    args = parser.parse_args()
    runner = run_sim if args.mode == "sim" else run_bare
    result = asyncio.run(
        runner(args.url, args.devices, args.rate_per_device, args.measure, args.connect_rate)
    )
    result["mode"] = args.mode
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
