"""Device clients for tests: enrol over HTTP, hold a `/ws/device/` socket as the SDK does.

A `DeviceClient` connects with `Authorization: Bearer <token>`, says `hello` (with the version
it runs), applies and acks every `policy`, records every frame with the time it arrived, and
reconnects with jittered exponential back-off when the socket drops (not after 4401 / 4409,
which tell a real device to stop). Tests are synchronous (pytest-django), so the clients live
on a `BackgroundLoop`: an asyncio loop in its own thread.
"""

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

T = TypeVar("T")

# Outer bound of one socket step (open, a reply, a close): it ends as soon as the step is done,
# in milliseconds on a quiet machine; a loaded 2-core machine can take seconds.
STEP_TIMEOUT_S = 30.0

CLOSE_UNAUTHORISED = 4401
CLOSE_SUPERSEDED = 4409
FINAL_CLOSE_CODES = frozenset({CLOSE_UNAUTHORISED, CLOSE_SUPERSEDED})


def ws_url(base_url: str) -> str:
    """`http://127.0.0.1:8000` → `ws://127.0.0.1:8000/ws/device/`."""
    return base_url.replace("http://", "ws://", 1).rstrip("/") + "/ws/device/"


async def enroll(
    http: httpx.AsyncClient, base_url: str, *, fleet_key: str, device_id: str, platform: str = ""
) -> str:
    """Enrol one device over HTTP; returns its token."""
    response = await http.post(
        f"{base_url}/api/v1/devices/enroll",
        json={"fleet_key": fleet_key, "device_id": device_id, "platform": platform},
    )
    assert response.status_code == 201, response.text
    token = response.json()["device_token"]
    assert isinstance(token, str)
    return token


async def enroll_many(
    base_url: str, *, fleet_key: str, device_ids: Iterable[str], concurrency: int = 16
) -> dict[str, str]:
    """Enrol many devices at once (a few requests in flight); device id → token."""
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:

        async def one(device_id: str) -> tuple[str, str]:
            async with limit:
                token = await enroll(
                    http, base_url, fleet_key=fleet_key, device_id=device_id, platform="android"
                )
                return device_id, token

        pairs = await asyncio.gather(*(one(d) for d in device_ids))
    return dict(pairs)


async def open_socket(base_url: str, token: str | None) -> ClientConnection:
    """A raw `/ws/device/` socket (no hello sent), for tests that speak the protocol by hand."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return await connect(
        ws_url(base_url),
        additional_headers=headers,
        proxy=None,
        max_size=None,
        compression=None,
        open_timeout=STEP_TIMEOUT_S,
        close_timeout=2,
    )


async def recv_json(socket: ClientConnection, timeout: float = STEP_TIMEOUT_S) -> dict[str, Any]:
    """The next frame, parsed (fails the test if none comes within `timeout`)."""
    raw = await asyncio.wait_for(socket.recv(), timeout)
    message = json.loads(raw)
    assert isinstance(message, dict), raw
    return message


async def close_code(socket: ClientConnection, timeout: float = STEP_TIMEOUT_S) -> int | None:
    """Read until the server closes the socket; its close code."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            await asyncio.wait_for(socket.recv(), timeout)
    return socket.close_code


@dataclass
class Frame:
    """One frame a device received: when (monotonic and wall clock) and what."""

    at: float
    wall: float
    message: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.message.get("type"))


@dataclass
class DeviceClient:
    """One simulated device: hello, apply and ack policies, reconnect with jittered back-off."""

    base_url: str
    device_id: str
    token: str
    policy_version: int | None = None
    auto_ack: bool = True
    backoff_base_s: float = 0.05
    backoff_max_s: float = 1.0
    sdk: str = "edge-sdk-test/1"
    frames: list[Frame] = field(default_factory=list)
    close_codes: list[int | None] = field(default_factory=list)
    connections: int = 0
    connect_failures: int = 0
    _socket: ClientConnection | None = None
    _task: "asyncio.Task[None] | None" = None
    _stopping: bool = False

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Run the connect / read / reconnect loop in the background (on the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Close the socket and stop reconnecting."""
        self._stopping = True
        if self._socket is not None:
            with contextlib.suppress(Exception):
                await self._socket.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    @property
    def finished(self) -> bool:
        """The loop has ended (stopped, or the server said 4401 / 4409)."""
        return self._task is not None and self._task.done()

    @property
    def is_open(self) -> bool:
        return self._socket is not None and self._socket.close_code is None

    async def send(self, message: dict[str, Any]) -> None:
        """Send one JSON frame on the current socket."""
        assert self._socket is not None, f"{self.device_id} has no socket"
        await self._socket.send(json.dumps(message))

    async def drop(self) -> None:
        """Lose the connection abruptly (as a phone going through a tunnel); it will reconnect."""
        if self._socket is not None:
            self._socket.transport.abort()

    # --- what tests look at ------------------------------------------------------------------

    def frames_since(self, moment: float, kind: str | None = None) -> list[Frame]:
        """Frames received after `moment` (time.monotonic()), optionally of one type."""
        return [f for f in self.frames if f.at >= moment and (kind is None or f.type == kind)]

    def last(self, kind: str) -> Frame | None:
        """The latest frame of this type."""
        return next((f for f in reversed(self.frames) if f.type == kind), None)

    # --- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        attempt = 0
        while not self._stopping:
            try:
                socket = await open_socket(self.base_url, self.token)
            except (OSError, InvalidHandshake, TimeoutError) as error:
                self.connect_failures += 1
                if isinstance(error, InvalidStatus) and error.response.status_code in (401, 403):
                    self.close_codes.append(CLOSE_UNAUTHORISED)
                    return
                await asyncio.sleep(self._backoff(attempt))
                attempt += 1
                continue
            self._socket = socket
            self.connections += 1
            attempt = 0
            code = await self._session(socket)
            self.close_codes.append(code)
            if code in FINAL_CLOSE_CODES or self._stopping:
                return
            await asyncio.sleep(self._backoff(attempt))
            attempt += 1

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, base·2^attempt)], so a restart is not a stampede."""
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2**attempt))

    async def _session(self, socket: ClientConnection) -> int | None:
        with contextlib.suppress(ConnectionClosed, OSError):
            await socket.send(
                json.dumps(
                    {
                        "type": "hello",
                        "device_id": self.device_id,
                        "policy_version": self.policy_version,
                        "sdk": self.sdk,
                        "platform": "android",
                        "model": "test-phone",
                    }
                )
            )
            async for raw in socket:
                message = json.loads(raw)
                self.frames.append(Frame(time.monotonic(), time.time(), message))
                if message.get("type") == "policy":
                    self.policy_version = message["version"]
                    if self.auto_ack:
                        await socket.send(
                            json.dumps({"type": "ack", "version": message["version"]})
                        )
        return socket.close_code


def wait_until(
    condition: Callable[[], bool], *, timeout: float, interval: float = 0.02, what: str = ""
) -> None:
    """Poll `condition` (from the test's thread) until true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


class BackgroundLoop:
    """An asyncio loop in a thread, so synchronous tests can drive async clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> "BackgroundLoop":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        async def cancel_leftovers() -> None:
            # Sockets a failed test left open: close them rather than leak pending tasks.
            current = asyncio.current_task()
            leftovers = [t for t in asyncio.all_tasks() if t is not current]
            for task in leftovers:
                task.cancel()
            await asyncio.gather(*leftovers, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_leftovers(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 2 * STEP_TIMEOUT_S) -> T:
        """Run a coroutine on the loop and wait for its result here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, func: Callable[[], Awaitable[T]], timeout: float = 2 * STEP_TIMEOUT_S) -> T:
        """`run(func())`."""

        async def wrapper() -> T:
            return await func()

        return self.run(wrapper(), timeout)


@contextlib.contextmanager
def device_clients(
    background: BackgroundLoop, tokens: dict[str, tuple[str, str]], **options: Any
) -> Iterator[dict[str, DeviceClient]]:
    """Start one client per device (device id → (base url, token)); stop them all on exit."""

    async def start() -> dict[str, DeviceClient]:
        clients = {
            device_id: DeviceClient(base_url=url, device_id=device_id, token=token, **options)
            for device_id, (url, token) in tokens.items()
        }
        for client in clients.values():
            client.start()
        return clients

    clients = background.run(start())
    try:
        yield clients
    finally:

        async def stop() -> None:
            await asyncio.gather(*(c.stop() for c in clients.values()))

        background.run(stop())
