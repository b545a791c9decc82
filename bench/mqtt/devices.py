"""Lightweight MQTT devices: one process holding thousands of raw MQTT 5 connections on asyncio.

A device here is what the SDK's MQTT transport does on the wire (edge_sdk/transport/mqtt.py),
without the rest of an SDK `Device` (no router, no policy store, no HTTP): it connects with
client id and username `{fleet}/{device_id}`, subscribes at QoS 1 to its fleet's retained state
and cloud pressure (and to the bench's baseline topic), parses each state with the SDK's own
`parse_state` and computes its version with `edge_sdk.assignment` (`FleetAssignment.version_for`,
the server's rule); when that is not the version it runs it subscribes to the version's
retained document topic, takes the document (checked: the version asked for), unsubscribes,
runs it and publishes `{"version": n, "waited_ms": w}` on its ack topic at QoS 1 after a random
wait w in [0, `ack_jitter_s`] (the SDK's `mqtt_ack_jitter_s`, since session 14; before, at
once). A state not newer than the last one applied is ignored (the seq rule). It starts as a
device that ran the fleet's stable version before (the SDK keeps its policy across restarts),
so connecting costs no document.

As the SDK does (since session 10): when a state names a stable or candidate whose document the
device does not hold (and that it does not need now), it takes that document in the background
after a random wait in [0, `prefetch_jitter_s`] (the SDK's `mqtt_prefetch_jitter_s`), once per
version; it holds the documents of its last `HELD_DOCUMENTS` versions (those the newest state
no longer names go first), so a stage change or a rollback to one of them runs at once, with no
round trip. Since session 11 the state's `published` (the fleet's newest published version) is
taken ahead the same way, so a rollout's start finds its cohort holding the candidate
(`prefetch_published=False`: session 10's SDK, which took the candidate only once a rollout
named it). `prefetch=False` is the SDK before session 10 (every change whose version is not the
one it runs costs the document's round trip).

The MQTT codec is the few packets this needs (CONNECT, SUBSCRIBE, UNSUBSCRIBE, PUBLISH QoS 0/1,
PUBACK), written here so that 7,500 connections fit one process: a paho client per device
costs ~10× the memory and CPU, which would measure the client, not the path.

The driver talks to each process over a Pipe with small command dicts (as bench/fanout does):
- connect  {host, port, devices: [[device_id, broker_index], ...], brokers: [[host, port]...],
            source: "127.0.0.2", fleet, prefix, stable, concurrency}
- mark     {}: forget what was seen (a new measurement starts)
- count    {seq, marker}: devices settled on a state >= seq; devices that got baseline marker;
           devices with no prefetch waiting or in flight and no ack waiting
- collect  {seq, marker}: {device_id: [t_settled, version]}, {device_id: t_marker}, when
           the last of its devices received state `seq` itself, and how many devices ran a
           version after taking its document then (a round trip) since `mark`
- close    {} / stop {}
"""

import asyncio
import functools
import json
import os
import random
import struct
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, cast

from edge_sdk import mqtt_topics
from edge_sdk.transport.mqtt import FleetState, parse_state

KEEPALIVE_S = 3600  # the run is bounded well under it: no PINGREQ needed
HELD_DOCUMENTS = 3  # as the SDK's DeviceConfig.mqtt_held_documents
BASELINE_TOPIC = "bench/baseline"  # under the prefix and fleet: {prefix}/fleets/{fleet}/bench


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value % 128, value // 128
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("!H", len(raw)) + raw


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def connect_packet(client_id: str, username: str) -> bytes:
    """MQTT 5 CONNECT, clean start, no properties, with a username (anonymous broker)."""
    header = _string("MQTT") + bytes([5, 0x82]) + struct.pack("!H", KEEPALIVE_S) + b"\x00"
    return _packet(0x10, header + _string(client_id) + _string(username))


def subscribe_packet(packet_id: int, topics: list[str]) -> bytes:
    body = struct.pack("!H", packet_id) + b"\x00"
    for topic in topics:
        body += _string(topic) + b"\x01"  # QoS 1
    return _packet(0x82, body)


def unsubscribe_packet(packet_id: int, topic: str) -> bytes:
    return _packet(0xA2, struct.pack("!H", packet_id) + b"\x00" + _string(topic))


def publish_packet(topic: str, packet_id: int, payload: bytes) -> bytes:
    """PUBLISH QoS 1, not retained."""
    return _packet(0x32, _string(topic) + struct.pack("!H", packet_id) + b"\x00" + payload)


def puback_packet(packet_id: int) -> bytes:
    return b"\x40\x02" + struct.pack("!H", packet_id)


@functools.lru_cache(maxsize=8)
def document_version(payload: bytes) -> int | None:
    """The version a retained document says it is (parsed once per process, as the SDK does)."""
    try:
        document = json.loads(payload)
    except ValueError:
        return None
    version = document.get("version") if isinstance(document, dict) else None
    return version if isinstance(version, int) else None


WORK_MODES = ("reads_quiet", "reads_over", "each_turn", "as_read")
QUIET_S = 0.002  # "reads_quiet": the process's reads have been quiet this long


class Inbox:
    """The messages this process's devices received, handled away from its socket reads, so that
    one device's work does not delay the receipt of another's message: each device of a real
    fleet has its own processor, while here thousands share one. A device settles at its own
    receipt time plus its own handling time, measured. `work`:

    - "reads_quiet" (since session 17): the work waits until the process has read nothing for
      `QUIET_S` (the fan-out to this process is over), then each device's is done;
    - "reads_over" (session 15): the work waits until a turn of the loop reads nothing, which
      can happen within a fan-out (the broker writes to a thousand sockets more slowly than
      one process reads them), so a batch's work could still delay the rest's receipt;
    - "each_turn" (session 14): done after each turn's reads, so a turn's work still delays the
      next turn's reads (a fan-out read over several turns);
    - "as_read" (before session 14, `--shared-cpu`): each message handled as it is read, so every
      device waits for the work of those read before it."""

    def __init__(self, work: str) -> None:
        if work not in WORK_MODES:
            raise ValueError(f"work: one of {WORK_MODES}, not {work!r}")
        self.work = work
        self.items: list[tuple[DeviceProtocol, str, bytes, float]] = []
        self.read_since_check = False
        self.last_read = 0.0

    def put(self, device: "DeviceProtocol", topic: str, payload: bytes, received_at: float) -> None:
        if self.work == "as_read":
            device.on_message(topic, payload, received_at)
            return
        self.last_read = time.monotonic()
        if not self.items:
            loop = asyncio.get_running_loop()
            if self.work == "reads_quiet":
                loop.call_later(QUIET_S, self.drain)
            else:
                loop.call_soon(self.drain)
        self.items.append((device, topic, payload, received_at))
        self.read_since_check = True

    def drain(self) -> None:
        if self.work == "reads_quiet":
            quiet = time.monotonic() - self.last_read
            if quiet < QUIET_S:
                asyncio.get_running_loop().call_later(QUIET_S - quiet, self.drain)
                return
        # A callback scheduled now runs in the next turn before that turn's reads are handled,
        # so "nothing read since the last check" means a whole turn read nothing.
        if self.work == "reads_over" and self.read_since_check:
            self.read_since_check = False
            asyncio.get_running_loop().call_soon(self.drain)
            return
        items, self.items = self.items, []
        self.read_since_check = False
        clock = time.perf_counter
        for device, topic, payload, received_at in items:
            settled = len(device.settled)
            began = clock()
            device.on_message(topic, payload, received_at)
            if len(device.settled) > settled:  # it settled: after its own handling
                seq, at, version = device.settled[-1]
                device.settled[-1] = (seq, at + clock() - began, version)


class Fleet:
    """What every device of the process shares: the fleet's topics and the inbox."""

    def __init__(
        self,
        slug: str,
        prefix: str,
        prefetch: bool = True,
        prefetch_jitter_s: float = 0.0,
        prefetch_published: bool = True,
        work: str = "reads_over",
        ack_jitter_s: float = 0.0,
    ) -> None:
        self.slug = slug
        self.prefix = prefix
        self.inbox = Inbox(work)
        self.ack_jitter_s = ack_jitter_s  # the SDK's mqtt_ack_jitter_s
        # As the SDK: take the documents a state names in the background (after the jitter),
        # hold the last few, so that a later stage or a rollback needs only the state.
        self.prefetch = prefetch
        self.prefetch_jitter_s = prefetch_jitter_s
        self.prefetch_published = prefetch and prefetch_published
        self.state_topic = mqtt_topics.fleet_state(prefix, slug)
        self.baseline_topic = f"{prefix}/fleets/{slug}/{BASELINE_TOPIC}"
        self.subscriptions = [
            self.state_topic,
            mqtt_topics.fleet_cloud_pressure(prefix, slug),
            self.baseline_topic,
        ]


class DeviceProtocol(asyncio.Protocol):
    """One device's MQTT connection and what it saw."""

    def __init__(self, device_id: str, fleet: Fleet, version: int | None) -> None:
        self.device_id = device_id
        self.fleet = fleet
        self.version = version  # the version it runs
        self.last_seq: int | None = None
        self.pending: tuple[int, int, str] | None = None  # (seq, version, document topic)
        self.held: list[int] = [version] if version is not None else []  # least recent first
        self.prefetching: tuple[int, str] | None = None  # (version, topic)
        self.prefetch_due: asyncio.TimerHandle | None = None  # a prefetch waiting its jitter
        self.prefetch_state: FleetState | None = None  # the newest state (what to prefetch)
        self.prefetch_tried: set[int] = set()
        self.ack_due: asyncio.TimerHandle | None = None  # an ack waiting its jitter
        self.settled: list[tuple[int, float, int | None]] = []  # (seq, t, version)
        self.round_trips = 0  # versions run after taking their document then (since `mark`)
        self.markers: dict[int, float] = {}
        self.states: dict[int, float] = {}  # seq → when the state itself arrived
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.next_id = 0
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ack_topic = mqtt_topics.device_topic(fleet.prefix, fleet.slug, device_id, "ack")

    def _packet_id(self) -> int:
        self.next_id = self.next_id % 65535 + 1
        return self.next_id

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        client_id = f"{self.fleet.slug}/{self.device_id}"
        self.transport.write(connect_packet(client_id, client_id))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"{self.device_id}: lost ({exc!r})"))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 2:
            length, shift, index = 0, 0, 1
            while True:
                if index >= len(buffer):
                    return
                byte = buffer[index]
                length |= (byte & 0x7F) << shift
                shift += 7
                index += 1
                if not byte & 0x80:
                    break
            end = index + length
            if len(buffer) < end:
                return
            first = buffer[0]
            body = bytes(buffer[index:end])
            del buffer[:end]
            self._on_packet(first, body)

    def _on_packet(self, first: int, body: bytes) -> None:
        kind = first >> 4
        if kind == 3:
            self._on_publish(first, body)
        elif kind == 2:  # CONNACK
            if body[1] != 0:
                self.ready.set_exception(ConnectionError(f"CONNACK {body[1]:#x}"))
                return
            assert self.transport is not None
            self.transport.write(subscribe_packet(self._packet_id(), self.fleet.subscriptions))
        elif kind == 9 and not self.ready.done():  # the first SUBACK: subscribed
            self.ready.set_result(None)

    def _on_publish(self, first: int, body: bytes) -> None:
        received_at = time.time()
        qos = (first >> 1) & 3
        (topic_length,) = struct.unpack_from("!H", body)
        topic = body[2 : 2 + topic_length].decode()
        offset = 2 + topic_length
        if qos:
            (packet_id,) = struct.unpack_from("!H", body, offset)
            offset += 2
            assert self.transport is not None
            self.transport.write(puback_packet(packet_id))
        length, shift = 0, 0
        while True:  # the properties' length
            byte = body[offset]
            offset += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        payload = body[offset + length :]
        if topic == self.fleet.baseline_topic:  # the bare publish: its receipt is all it does
            if payload:
                self.markers[int(payload[:12])] = received_at
            return
        self.fleet.inbox.put(self, topic, payload, received_at)

    def on_message(self, topic: str, payload: bytes, received_at: float) -> None:
        """What a device does with a message of the fleet (received at `received_at`)."""
        if topic == self.fleet.state_topic:
            state = parse_state(payload, self.fleet.slug)
            if isinstance(state, FleetState):
                self._on_state(state, received_at)
        elif self.pending is not None and topic == self.pending[2]:
            self._on_document(payload, received_at)
        elif self.prefetching is not None and topic == self.prefetching[1]:
            self._on_prefetched(payload)

    def _on_state(self, state: FleetState, received_at: float) -> None:
        self.states.setdefault(state.seq, received_at)
        newest = self.pending[0] if self.pending is not None else self.last_seq
        if newest is not None and state.seq <= newest:
            return  # not newer than what it has: ignored (a resubscription's retained copy)
        self.prefetch_state = state
        version = state.assignment.version_for(self.device_id)
        assert self.transport is not None
        if self.pending is not None and self.pending[1] != version:
            self.transport.write(unsubscribe_packet(self._packet_id(), self.pending[2]))
            self.pending = None
        if version is None or version == self.version:
            self.pending = None
            self.last_seq = state.seq
            self.settled.append((state.seq, received_at, self.version))
            self._prefetch(state)
            return
        if self.fleet.prefetch and version in self.held:  # its document is already here
            self.pending = None
            self._run(state.seq, version, received_at)
            self._prefetch(state)
            return
        if self.pending is not None:  # the same document is on its way: a newer seq only
            self.pending = (state.seq, version, self.pending[2])
            return
        if self.prefetching is not None and self.prefetching[0] == version:
            self.pending = (state.seq, version, self.prefetching[1])  # already asked for
            self.prefetching = None
            return
        topic = mqtt_topics.fleet_version(self.fleet.prefix, self.fleet.slug, version)
        self.pending = (state.seq, version, topic)
        self.transport.write(subscribe_packet(self._packet_id(), [topic]))

    def _prefetch(self, state: FleetState) -> None:
        """After the state's own version: take the other versions it names, not held, in the
        background after the jitter (as the SDK's `_prefetch_for`)."""
        if (
            not self.fleet.prefetch
            or self.prefetching is not None
            or self.prefetch_due is not None
            or self._prefetch_next() is None
        ):
            return
        delay = random.uniform(0, self.fleet.prefetch_jitter_s)
        loop = asyncio.get_running_loop()
        self.prefetch_due = loop.call_later(delay, self._start_prefetch)

    def _prefetch_next(self) -> int | None:
        state = self.prefetch_state
        if state is None:
            return None
        own = state.assignment.version_for(self.device_id)
        ahead = state.published if self.fleet.prefetch_published else None
        for version in (state.assignment.candidate, state.assignment.stable, ahead):
            if (
                version is not None
                and version not in (self.version, own)
                and version not in self.held
                and version not in self.prefetch_tried
            ):
                return version
        return None

    def _start_prefetch(self) -> None:
        self.prefetch_due = None
        version = self._prefetch_next()
        if version is None or self.transport is None or self.prefetching is not None:
            return
        self.prefetch_tried.add(version)
        if self.pending is not None and self.pending[1] == version:
            return  # on its way for the device itself
        topic = mqtt_topics.fleet_version(self.fleet.prefix, self.fleet.slug, version)
        self.prefetching = (version, topic)
        self.transport.write(subscribe_packet(self._packet_id(), [topic]))

    def _on_prefetched(self, payload: bytes) -> None:
        assert self.prefetching is not None
        assert self.transport is not None
        version, topic = self.prefetching
        if document_version(payload) == version:
            self._hold(version)
            self.transport.write(unsubscribe_packet(self._packet_id(), topic))
            self.prefetching = None
            self._start_prefetch()  # the state may name another

    def _hold(self, version: int) -> None:
        """As the SDK's HeldDocuments: the least recently used of the versions the newest
        state no longer names goes first, then the least recently used."""
        if version in self.held:
            self.held.remove(version)
        self.held.append(version)
        state = self.prefetch_state
        named = state.named() if state is not None else frozenset()
        while len(self.held) > HELD_DOCUMENTS:
            unnamed = (v for v in self.held if v not in named and v != version)
            self.held.remove(next(unnamed, self.held[0]))

    @property
    def idle(self) -> bool:
        """No prefetch waiting its jitter or in flight, no ack waiting its jitter."""
        return self.prefetching is None and self.prefetch_due is None and self.ack_due is None

    def _run(self, seq: int, version: int, received_at: float) -> None:
        """Run `version` (its document is here) for state `seq`, and ack it."""
        assert self.transport is not None
        if self.version is not None:
            self._hold(self.version)  # as the SDK keeps the one it leaves
        self.version = version
        self._hold(version)
        self.last_seq = seq
        self.settled.append((seq, received_at, version))
        # As the SDK's `MqttTransport.ack`: after a random wait in [0, the ack jitter], saying
        # how long it waited; a newer ack replaces one still waiting.
        if self.ack_due is not None:
            self.ack_due.cancel()
        delay = random.uniform(0, self.fleet.ack_jitter_s) if self.fleet.ack_jitter_s > 0 else 0
        self.ack_due = asyncio.get_running_loop().call_later(
            delay, self._ack, version, time.monotonic()
        )

    def _ack(self, version: int, applied: float) -> None:
        self.ack_due = None
        if self.transport is None:
            return
        waited_ms = int((time.monotonic() - applied) * 1000)
        ack = b'{"version":%d,"waited_ms":%d}' % (version, waited_ms)
        self.transport.write(publish_packet(self.ack_topic, self._packet_id(), ack))

    def _on_document(self, payload: bytes, received_at: float) -> None:
        assert self.pending is not None
        assert self.transport is not None
        seq, version, topic = self.pending
        if document_version(payload) != version:
            return  # not the version asked for: dropped (the SDK counts it)
        self.pending = None
        self.transport.write(unsubscribe_packet(self._packet_id(), topic))
        self.round_trips += 1
        self._run(seq, version, received_at)
        if self.prefetch_state is not None:
            self._prefetch(self.prefetch_state)


@dataclass
class Worker:
    """The devices of this process and the command loop."""

    conn: Connection
    devices: list[DeviceProtocol] = field(default_factory=list)
    done: "asyncio.Future[None] | None" = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        reader = threading.Thread(target=self._read_commands, args=(loop,), daemon=True)
        reader.start()
        await self.done
        await self.cmd_close()

    def _read_commands(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                command = self.conn.recv()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(self._finish)
                return
            loop.call_soon_threadsafe(
                lambda c=command: loop.create_task(self._answer(c))  # type: ignore[misc]
            )
            if command.get("cmd") == "stop":
                return

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
        self,
        devices: list[list[Any]],
        brokers: list[list[Any]],
        source: str,
        fleet: str,
        prefix: str,
        stable: int | None,
        concurrency: int = 200,
        prefetch: bool = True,
        prefetch_jitter_s: float = 0.0,
        prefetch_published: bool = True,
        work: str = "reads_over",
        ack_jitter_s: float = 0.0,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        shared = Fleet(
            fleet, prefix, prefetch, prefetch_jitter_s, prefetch_published, work, ack_jitter_s
        )
        gate = asyncio.Semaphore(concurrency)
        rss_before = rss_kib()

        async def one(device_id: str, broker: int) -> DeviceProtocol:
            async with gate:
                host, port = brokers[broker]
                _, protocol = await loop.create_connection(
                    lambda: DeviceProtocol(device_id, shared, stable),
                    host,
                    port,
                    local_addr=(source, 0),
                )
                await asyncio.wait_for(protocol.ready, 60)
                return protocol

        self.devices = list(await asyncio.gather(*(one(d, b) for d, b in devices)))
        return {"connected": len(self.devices), "rss_before": rss_before, "rss": rss_kib()}

    async def cmd_mark(self) -> dict[str, Any]:
        for device in self.devices:
            device.settled.clear()
            device.markers.clear()
            device.states.clear()
            device.round_trips = 0
        return {"ok": True}

    async def cmd_count(self, seq: int, marker: int) -> dict[str, Any]:
        settled = sum(1 for d in self.devices if d.last_seq is not None and d.last_seq >= seq)
        marked = sum(1 for d in self.devices if marker in d.markers)
        idle = sum(1 for d in self.devices if d.idle)
        return {"settled": settled, "marked": marked, "idle": idle}

    async def cmd_collect(self, seq: int, marker: int) -> dict[str, Any]:
        settled: dict[str, list[Any]] = {}
        for device in self.devices:
            for seen_seq, at, version in device.settled:
                if seen_seq >= seq:
                    settled[device.device_id] = [at, version]
                    break
        markers = {d.device_id: d.markers[marker] for d in self.devices if marker in d.markers}
        states = [d.states[seq] for d in self.devices if seq in d.states]
        return {
            "settled": settled,
            "markers": markers,
            "state_last": max(states, default=0.0),
            "round_trips": sum(d.round_trips for d in self.devices),
            "rss": rss_kib(),
        }

    async def cmd_close(self) -> dict[str, Any]:
        for device in self.devices:
            if device.transport is not None:
                device.transport.write(b"\xe0\x00")  # DISCONNECT: no last will
                device.transport.close()
        self.devices = []
        await asyncio.sleep(0.1)
        return {"ok": True}

    async def cmd_stop(self) -> dict[str, Any]:
        asyncio.get_running_loop().call_soon(self._finish)
        return {"ok": True}


def rss_kib() -> int:
    """This process's resident set size (VmRSS), KiB."""
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main(conn: Connection) -> None:
    """Process entry point (multiprocessing target), on uvloop like bench/fanout's clients."""
    from bench.fanout.clients import run_loop

    run_loop(Worker(conn).run())
