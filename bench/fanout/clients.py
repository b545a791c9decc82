"""Simulated devices: one process holding many real WebSocket connections (websockets library).

The driver starts a few of these processes (multiprocessing, spawn) and talks to each over a
Pipe with small command dicts. Each device behaves like the SDK (PROTOCOL.md): it connects with
`Authorization: Bearer`, sends `hello` with the version it runs (null at first), applies a
`policy` and acks it, and after a lost connection reconnects with full-jitter exponential
back-off and says `hello` again. Every frame is logged with `time.time()` at receipt (the
driver's clock is the same machine clock), so the driver can time a push to its last device.

Sockets are held in named groups, one per server ("ours", "baseline"), so that the same
devices can be connected to both servers at once and their pushes interleaved.

Commands (dict with "cmd" and "args"), each answered with one dict:
- connect  {group, url, devices: [[device_id, token], ...], concurrency}: open and greet all.
- mark     {}: forget every logged frame, in every group (a new measurement starts).
- count    {group, kind, version}: devices with at least one such frame since the mark, and
           devices answered after a hello since the mark (reconnects).
- collect  {group}: {device_id: [[t, kind, version, bytes, stage], ...]} since the mark, and
           {device_id: t} of the first hello answer since the mark.
- close    {group}: close the group's sockets, stop reconnecting.
- stop     {}: close everything and exit.
"""

import asyncio
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 5.0
_VERSION = re.compile(r'"version":\s*(\d+)')
_STAGE = re.compile(r'"rollout":\s*(?:null|\{[^{}]*"stage":\s*(\d+))')


def classify(text: str) -> tuple[str, int | None, int | None]:
    """(type, version, rollout stage) of a server frame; cheap for the large `policy` frame.

    The devices only need the type and version to act; a full json.loads of every 5 KB frame
    would make the clients, not the server, the bottleneck of the measurement.
    """
    if text.startswith('{"type":"policy"'):
        version = _VERSION.search(text)
        stage = _STAGE.search(text, max(0, len(text) - 200))
        return (
            "policy",
            int(version.group(1)) if version else None,
            int(stage.group(1)) if stage and stage.group(1) else None,
        )
    try:
        message = json.loads(text)
    except ValueError:
        return "invalid", None, None
    if not isinstance(message, dict):
        return "invalid", None, None
    version = message.get("version")
    rollout = message.get("rollout")
    return (
        str(message.get("type")),
        version if isinstance(version, int) else None,
        rollout.get("stage") if isinstance(rollout, dict) else None,
    )


@dataclass(slots=True)
class Device:
    """One simulated device and what it saw."""

    device_id: str
    token: str
    version: int | None = None  # the version it runs (sent in hello)
    greeted: bool = False  # answered (policy/up_to_date) on the current socket
    log: list[tuple[float, str, int | None, int, int | None]] = field(default_factory=list)
    greeted_at: float | None = None  # first hello answer since the mark
    socket: Any = None


class Group:
    """The sockets of one server."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.devices: dict[str, Device] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.closing = False

    async def close(self) -> None:
        self.closing = True
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


class Worker:
    """The devices of this process and the command loop."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.groups: dict[str, Group] = {}
        self.done: asyncio.Future[None] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        # Commands are read by a thread: the loop's reader would make the pipe non-blocking,
        # and a large command (thousands of tokens) then fails half-read.
        reader = threading.Thread(target=self._read_commands, args=(loop,), daemon=True)
        reader.start()
        try:
            await self.done
        finally:
            for group in self.groups.values():
                await group.close()

    def _read_commands(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                command = self.conn.recv()
            except (EOFError, OSError):  # the driver is gone
                loop.call_soon_threadsafe(self._finish)
                return
            loop.call_soon_threadsafe(self._start_answer, command)
            if command.get("cmd") == "stop":
                return

    def _start_answer(self, command: dict[str, Any]) -> None:
        asyncio.get_running_loop().create_task(self._answer(command))

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def _answer(self, command: dict[str, Any]) -> None:
        try:
            reply = await getattr(self, "cmd_" + command["cmd"])(**command.get("args", {}))
        except Exception as error:  # reported to the driver, which fails the run
            reply = {"error": repr(error)}
        self.conn.send(reply)

    async def cmd_connect(
        self, group: str, url: str, devices: list[list[str]], concurrency: int = 100
    ) -> dict[str, Any]:
        if group in self.groups:
            await self.groups[group].close()
        sockets = self.groups[group] = Group(url)
        gate = asyncio.Semaphore(concurrency)
        ready: list[asyncio.Future[None]] = []
        loop = asyncio.get_running_loop()
        for device_id, token in devices:
            device = sockets.devices[device_id] = Device(device_id, token)
            first: asyncio.Future[None] = loop.create_future()
            ready.append(first)
            sockets.tasks.append(loop.create_task(self._device_loop(sockets, device, gate, first)))
        await asyncio.gather(*ready)
        live = [d for d in sockets.devices.values() if d.socket is not None]
        return {
            "open": len(live),
            "greeted": sum(1 for d in live if d.greeted),
            "versions": _histogram(d.version for d in live),
        }

    async def cmd_mark(self) -> dict[str, Any]:
        for group in self.groups.values():
            for device in group.devices.values():
                device.log.clear()
                device.greeted_at = None
        return {"ok": True}

    async def cmd_count(self, group: str, kind: str, version: int | None = None) -> dict[str, Any]:
        devices = self.groups[group].devices.values()
        matched = 0
        for device in devices:
            for _, seen_kind, seen_version, _, _ in device.log:
                if seen_kind == kind and (version is None or seen_version == version):
                    matched += 1
                    break
        reconnected = sum(1 for d in devices if d.greeted_at is not None)
        return {"matched": matched, "reconnected": reconnected}

    async def cmd_collect(self, group: str) -> dict[str, Any]:
        devices = self.groups[group].devices.values()
        return {
            "log": {d.device_id: d.log[:] for d in devices if d.log},
            "greeted_at": {d.device_id: d.greeted_at for d in devices if d.greeted_at},
        }

    async def cmd_close(self, group: str) -> dict[str, Any]:
        if group in self.groups:
            await self.groups.pop(group).close()
        return {"ok": True}

    async def cmd_stop(self) -> dict[str, Any]:
        for group in list(self.groups):
            await self.groups.pop(group).close()
        asyncio.get_running_loop().call_soon(self._finish)
        return {"ok": True}

    async def _device_loop(
        self, group: Group, device: Device, gate: asyncio.Semaphore, first: "asyncio.Future[None]"
    ) -> None:
        """Connect, hello, apply/ack; on any loss back off (full jitter) and start again."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        attempt = 0
        held_gate = False
        await gate.acquire()
        held_gate = True
        try:
            while not group.closing:
                try:
                    async with connect(
                        group.url,
                        additional_headers={"Authorization": f"Bearer {device.token}"},
                        open_timeout=30,
                        max_size=2**20,
                    ) as socket:
                        device.socket = socket
                        await socket.send(
                            json.dumps(
                                {
                                    "type": "hello",
                                    "device_id": device.device_id,
                                    "policy_version": device.version,
                                    "sdk": "bench-fanout",
                                    "platform": "bench",
                                    "model": "loopback",
                                }
                            )
                        )
                        async for text in socket:
                            received_at = time.time()
                            kind, version, stage = classify(str(text))
                            device.log.append((received_at, kind, version, len(text), stage))
                            if kind == "policy" and version is not None:
                                device.version = version
                                await socket.send(f'{{"type":"ack","version":{version}}}')
                            elif kind == "up_to_date" and version is not None:
                                device.version = version
                            if kind in ("policy", "up_to_date") and not device.greeted:
                                device.greeted = True
                                attempt = 0
                                if device.greeted_at is None:
                                    device.greeted_at = received_at
                                if held_gate:
                                    gate.release()
                                    held_gate = False
                                if not first.done():
                                    first.set_result(None)
                except (OSError, TimeoutError, WebSocketException, asyncio.IncompleteReadError):
                    pass
                device.socket = None
                device.greeted = False
                if group.closing:
                    break
                delay = random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt))
                attempt += 1
                await asyncio.sleep(delay)
        finally:
            device.socket = None
            device.greeted = False
            if held_gate:
                gate.release()
            if not first.done():
                first.set_result(None)


def _histogram(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def main(conn: Connection) -> None:
    """Process entry point (multiprocessing target)."""
    run_loop(Worker(conn).run())


def run_loop(coro: Any) -> None:
    """Run on uvloop, as uvicorn does (the server under test and the baseline alike)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        asyncio.run(coro)
    else:
        uvloop.run(coro)
