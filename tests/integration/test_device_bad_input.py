"""Bad input on `/ws/device/`, against a real server: refused tokens close with 4401; a bad
frame gets an `error` and the socket stays open; nothing is recorded for a device posing as
another."""

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from routing_policies.models import Device
from routing_policies.services import device_enroll, device_revoke
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, fuzz_bodies, with_field
from tests.live_server import asgi_server

from .ws_clients import CLOSE_UNAUTHORISED, close_code, open_socket, recv_json

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

Scenario = Callable[[ClientConnection], Awaitable[Any]]


@pytest.fixture
def phone(transactional_db: None, fleet: Any, fleet_key: str) -> tuple[str, str]:
    """An enrolled device `phone-1` (fleet on v1): (device id, token)."""
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
    return "phone-1", token


@pytest.fixture
def other_phone(phone: tuple[str, str], fleet_key: str) -> Device:
    """A second enrolled device, `phone-2`, that never connected."""
    device, _ = device_enroll(fleet_key=fleet_key, device_id="phone-2", platform="ios")
    return device


def _hello(device_id: Any = "phone-1", version: Any = None, **extra: Any) -> str:
    return json.dumps(
        {"type": "hello", "device_id": device_id, "policy_version": version, "sdk": "t/1", **extra}
    )


def _run(url: str, token: str | None, scenario: Scenario) -> Any:
    """Open a socket with `token`, run `scenario` on it, close it."""

    async def main() -> Any:
        socket = await open_socket(url, token)
        try:
            return await scenario(socket)
        finally:
            await socket.close()

    return asyncio.run(main())


async def _still_works(socket: ClientConnection) -> dict[str, Any]:
    """After an error: a proper hello is still answered on the same socket."""
    await socket.send(_hello())
    return await recv_json(socket)


# --- tokens ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token", ["dt_not-a-real-token", "", "not-even-prefixed", "dt_" + "x" * 300, None]
)
def test_device_socket__bad_or_missing_token__closed_4401(
    asgi_server: str, phone: tuple[str, str], token: str | None
) -> None:
    # Given a server with an enrolled device
    # When a socket opens with a wrong, empty, overlong or no token, and says hello
    async def scenario(socket: ClientConnection) -> int | None:
        with contextlib.suppress(ConnectionClosed):  # it may be closed before the hello goes
            await socket.send(_hello())
        return await close_code(socket)

    code = _run(asgi_server, token, scenario)

    # Then the server closes it with 4401 and never answers the hello
    assert code == CLOSE_UNAUTHORISED
    assert not Device.objects.get(device_id="phone-1").connected


def test_device_socket__revoked_token__closed_4401(
    asgi_server: str, phone: tuple[str, str], publisher: Any
) -> None:
    # Given a device whose token was revoked
    device_revoke(actor=publisher, device=Device.objects.get(device_id="phone-1"))

    # When it connects with it
    code = _run(asgi_server, phone[1], close_code)

    # Then 4401
    assert code == CLOSE_UNAUTHORISED


def test_device_socket__token_replaced_by_reenrolment__old_one_closed_4401(
    asgi_server: str, phone: tuple[str, str], fleet_key: str
) -> None:
    # Given a device that enrolled again (its first token is replaced)
    device_enroll(fleet_key=fleet_key, device_id="phone-1")

    # When the first token is used
    code = _run(asgi_server, phone[1], close_code)

    # Then 4401
    assert code == CLOSE_UNAUTHORISED


# --- malformed frames: error, socket stays open ----------------------------------------------


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ('{"type": "hello", "device_id": ', "bad_message"),
        ("not json at all", "bad_message"),
        ("[]", "bad_message"),
        ('"hello"', "bad_message"),
        ("null", "bad_message"),
        ('{"device_id": "phone-1"}', "bad_message"),
        ('{"type": 7}', "bad_message"),
        ('{"type": "subscribe"}', "unknown_type"),
        ('{"type": "HELLO", "device_id": "phone-1"}', "unknown_type"),
        ('{"type": "ack"}', "bad_message"),
        ('{"type": "ack", "version": "1"}', "bad_message"),
        ('{"type": "ack", "version": true}', "bad_message"),
        (_hello(version="7"), "bad_message"),
        (_hello(version=True), "bad_message"),
        (_hello(version=1.5), "bad_message"),
        (_hello(device_id=12345), "bad_message"),
        (_hello(device_id=None), "bad_message"),
        (_hello(sdk=5), "bad_message"),
        (_hello(platform=["android"]), "bad_message"),
        (_hello(model="m" * 129), "bad_message"),
    ],
)
def test_device_socket__malformed_frame__error_and_socket_stays_open(
    asgi_server: str, phone: tuple[str, str], frame: str, code: str
) -> None:
    # Given a connected device
    # When it sends a malformed frame, then a proper hello
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        await socket.send(frame)
        error = await recv_json(socket)
        return error, await _still_works(socket)

    error, answer = _run(asgi_server, phone[1], scenario)

    # Then it gets an error naming the problem, and the hello is still answered
    assert error["type"] == "error"
    assert error["code"] == code
    assert isinstance(error["detail"], str)
    assert error["detail"]
    assert (answer["type"], answer["version"]) == ("policy", 1)


def test_device_socket__binary_frame__error_and_socket_stays_open(
    asgi_server: str, phone: tuple[str, str]
) -> None:
    # Given a connected device
    # When it sends a binary frame
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        await socket.send(_hello().encode())
        error = await recv_json(socket)
        return error, await _still_works(socket)

    error, answer = _run(asgi_server, phone[1], scenario)

    # Then an error says frames are JSON text, and the socket still works
    assert (error["type"], error["code"]) == ("error", "bad_message")
    assert answer["type"] == "policy"


@pytest.mark.parametrize(
    "frame",
    [
        _hello(padding="x" * (64 * 1024)),
        _hello(padding="€" * 22_000),  # 22,000 characters, 66,000 bytes
        "y" * (512 * 1024),
    ],
    ids=["ascii-64k", "multibyte-64k", "half-a-mib-of-garbage"],
)
def test_device_socket__frame_over_64_kib__error_too_large_and_no_crash(
    asgi_server: str, phone: tuple[str, str], frame: str
) -> None:
    # Given a connected device
    # When it sends a frame over 64 KiB
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        await socket.send(frame)
        error = await recv_json(socket)
        return error, await _still_works(socket)

    error, answer = _run(asgi_server, phone[1], scenario)

    # Then it is refused as too large (not parsed), and the socket and server carry on
    assert (error["type"], error["code"]) == ("error", "too_large")
    assert answer["type"] == "policy"
    assert Device.objects.get(device_id="phone-1").sdk == "t/1"


@pytest.mark.parametrize("field", ["sdk", "platform", "extra"])
@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_device_socket__hostile_json_value__error_names_field_nothing_stored(
    asgi_server: str, phone: tuple[str, str], hostile: Hostile, field: str
) -> None:
    # Given a connected device
    # When its hello carries a field nested 1,000 deep, a NUL or lone surrogate, or NaN
    frame = with_field(json.loads(_hello(sdk="evil/1")), field, hostile.raw)

    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], str, dict[str, Any]]:
        await socket.send(frame)
        error = await recv_json(socket)
        sdk = (await Device.objects.aget(device_id="phone-1")).sdk
        return error, sdk, await _still_works(socket)

    error, sdk_after_error, answer = _run(asgi_server, phone[1], scenario)

    # Then an error frame names the field, the hello is not recorded, the socket still works
    assert (error["type"], error["code"]) == ("error", "bad_message")
    assert_names(
        {"details": [{"field": error["field"], "message": error["detail"]}]}, field, hostile
    )
    assert sdk_after_error == ""
    assert answer["type"] == "policy"
    assert Device.objects.get(device_id="phone-1").sdk == "t/1"


_ANSWERS = {"policy", "up_to_date"}
_KNOWN_ERRORS = {"bad_message", "unknown_type", "too_large", "device_mismatch", "not_assigned"}
FRAMES = st.one_of(
    fuzz_bodies(json.loads(_hello())),
    fuzz_bodies({"type": "ack", "version": 1}),
    fuzz_bodies({"type": "hello"}),
)


def test_device_socket__fuzzed_frames__never_dropped_or_stored_socket_stays_sane(
    asgi_server: str, phone: tuple[str, str]
) -> None:
    # Given an enrolled device
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(frame=FRAMES)
    def check(frame: bytes) -> None:
        # When a socket sends any frame at all (text when it is UTF-8, else binary), then hello
        async def scenario(socket: ClientConnection) -> list[dict[str, Any]]:
            try:
                await socket.send(frame.decode())
            except UnicodeDecodeError:
                await socket.send(frame)
            await socket.send(_hello())
            received = [await recv_json(socket)]
            while received[-1]["type"] not in _ANSWERS:
                received.append(await recv_json(socket))
            return received

        received = _run(asgi_server, phone[1], scenario)

        # Then every frame before the answer is an error the protocol names or a policy frame,
        # the socket answered the hello, and nothing but that hello was recorded
        for message in received[:-1]:
            assert message["type"] in {"error", "cloud_pressure", *_ANSWERS}, (frame, message)
            if message["type"] == "error":
                assert message["code"] in _KNOWN_ERRORS, (frame, message)
        assert Device.objects.count() == 1
        assert Device.objects.get(device_id="phone-1").sdk == "t/1"

    check()


# --- acks and identities ---------------------------------------------------------------------


@pytest.mark.parametrize("hello_first", [True, False], ids=["after-hello", "before-hello"])
def test_device_socket__ack_of_version_never_assigned__error_not_recorded(
    asgi_server: str, phone: tuple[str, str], hello_first: bool
) -> None:
    # Given a connected device on a fleet running v1
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        if hello_first:
            await socket.send(_hello(version=1))
            await recv_json(socket)
        # When it acks v7, which it was never assigned (or anything before its hello)
        await socket.send(json.dumps({"type": "ack", "version": 7 if hello_first else 1}))
        error = await recv_json(socket)
        return error, await _still_works(socket)

    error, answer = _run(asgi_server, phone[1], scenario)

    # Then it is told so, nothing is recorded, and the socket still works
    assert (error["type"], error["code"]) == ("error", "not_assigned")
    assert Device.objects.get(device_id="phone-1").acked_version is None
    assert answer["type"] in ("policy", "up_to_date")


def test_device_socket__ack_of_assigned_version__recorded(
    asgi_server: str, phone: tuple[str, str]
) -> None:
    # Given a connected device that was sent v1
    async def scenario(socket: ClientConnection) -> None:
        await socket.send(_hello())
        await recv_json(socket)
        # When it acks v1
        await socket.send(json.dumps({"type": "ack", "version": 1}))
        # (a hello round-trip: the ack before it has been handled)
        await _still_works(socket)

    _run(asgi_server, phone[1], scenario)

    # Then the registry shows it on v1
    device = Device.objects.get(device_id="phone-1")
    assert device.acked_version == 1
    assert device.acked_at is not None


def test_device_socket__hello_as_another_device__error_nothing_recorded_for_it(
    asgi_server: str, phone: tuple[str, str], other_phone: Device
) -> None:
    # Given phone-1 connected with its own token, and phone-2 enrolled but never seen
    # When phone-1 says hello as phone-2, then acks as if it were
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        await socket.send(_hello(device_id="phone-2", version=1, sdk="imposter/6.6"))
        error = await recv_json(socket)
        await socket.send(json.dumps({"type": "ack", "version": 1}))
        ack_error = await recv_json(socket)
        return error, ack_error

    error, ack_error = _run(asgi_server, phone[1], scenario)

    # Then it is refused, and nothing about phone-2 changed
    assert (error["type"], error["code"]) == ("error", "device_mismatch")
    assert ack_error["code"] == "not_assigned"
    victim = Device.objects.get(device_id="phone-2")
    assert (victim.sdk, victim.reported_version, victim.acked_version) == ("", None, None)
    assert victim.last_seen_at is None
    assert not victim.connected


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ({"accelerator": "tpu"}, "attributes.accelerator"),
        ({"memory_gb": 4096}, "attributes.memory_gb"),
        ({"region": "eu\u0000west"}, "attributes.region"),
        ({"colour": "red"}, "attributes.colour"),
        ("npu", "attributes"),
    ],
)
def test_device_socket__hello_with_bad_attribute__error_names_it_nothing_recorded(
    asgi_server: str, phone: tuple[str, str], attributes: Any, field: str
) -> None:
    # Given a connected device that reported an NPU at some point
    Device.objects.filter(device_id="phone-1").update(attributes={"accelerator": "npu"})

    # When its hello carries an attribute out of bounds, then a good one
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        await socket.send(_hello(sdk="bad/1", attributes=attributes))
        error = await recv_json(socket)
        await socket.send(_hello(attributes={"accelerator": "gpu", "os_version": "14"}))
        return error, await recv_json(socket)

    error, answer = _run(asgi_server, phone[1], scenario)

    # Then the error frame names the attribute; only the good hello is recorded
    assert (error["code"], error["field"]) == ("bad_message", field)
    assert answer["type"] == "policy"
    device = Device.objects.get(device_id="phone-1")
    assert device.attributes == {"accelerator": "gpu", "os_version": "14"}
    assert device.sdk == "t/1"


@pytest.mark.parametrize("version", [-1, 2**31, 10**30, 1.5, "7", True])
def test_device_socket__hello_policy_version_out_of_range__error_names_it_nothing_recorded(
    asgi_server: str, phone: tuple[str, str], version: Any
) -> None:
    # Given a connected device (found by fuzzing: a negative version reached the database's
    # check and the socket died with a 500 of its own)
    async def scenario(socket: ClientConnection) -> tuple[dict[str, Any], dict[str, Any]]:
        # When its hello reports a version that no version can be, then a good hello
        await socket.send(_hello(version=version, sdk="bad/1"))
        error = await recv_json(socket)
        await socket.send(_hello())
        return error, await recv_json(socket)

    error, answer = _run(asgi_server, phone[1], scenario)

    # Then the error names the field, the socket stays open, only the good hello is recorded
    assert (error["type"], error["code"], error["field"]) == (
        "error",
        "bad_message",
        "policy_version",
    )
    assert answer["type"] == "policy"
    device = Device.objects.get(device_id="phone-1")
    assert (device.sdk, device.reported_version) == ("t/1", None)
