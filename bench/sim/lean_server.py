"""A lean control plane for bench/sim: the device endpoints of PROTOCOL.md as a bare ASGI app.

The benchmark measures the CPU of the *simulator* process, so the server must not be what
limits it (the real one enrols ~20 devices/s per process and would need several to ingest the
telemetry of thousands of devices). This answers every endpoint a device uses, validly and
cheaply, with no database: enrolment (a token per device id), the policy (one document, ETag),
telemetry (counts events, 202), and `/ws/device/` (`hello` → `policy`, acks counted).

    uvicorn bench.sim.lean_server:app  (with LEAN_POLICY_FILE pointing at a policy document)
"""

import json
import os
from pathlib import Path
from typing import Any

Scope = dict[str, Any]
Receive = Any
Send = Any

_DOCUMENT: dict[str, Any] = json.loads(Path(os.environ["LEAN_POLICY_FILE"]).read_text())
_ETAG = str(_DOCUMENT["etag"]).encode()
_POLICY_BODY = json.dumps(_DOCUMENT).encode()
_POLICY_FRAME = json.dumps({"type": "policy", **_DOCUMENT, "rollout": None})
_UP_TO_DATE = json.dumps({"type": "up_to_date", "version": _DOCUMENT["version"]})
COUNTERS = {"enrolled": 0, "events": 0, "batches": 0, "sockets": 0, "acks": 0}


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, headers: list[Any] | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _http(scope: Scope, receive: Receive, send: Send) -> None:
    path, method = scope["path"], scope["method"]
    if method == "POST" and path == "/api/v1/devices/enroll":
        try:
            request = json.loads(await _body(receive))
        except ValueError:  # a client cut off mid-request (enrolments queued at its shutdown)
            await _respond(send, 400, b'{"error":{"code":"bad_request"}}')
            return
        COUNTERS["enrolled"] += 1
        token = f"tok-{request['device_id']}"
        await _respond(send, 201, json.dumps({"device_token": token}).encode())
    elif method == "POST" and path == "/api/v1/telemetry":
        try:
            events = json.loads(await _body(receive))["events"]
        except (ValueError, KeyError):  # a client cut off mid-request (at its shutdown)
            await _respond(send, 400, b'{"error":{"code":"bad_batch"}}')
            return
        COUNTERS["events"] += len(events)
        COUNTERS["batches"] += 1
        await _respond(send, 202, json.dumps({"accepted": len(events), "duplicates": 0}).encode())
    elif method == "GET" and path == "/api/v1/devices/me/policy":
        headers = dict(scope["headers"])
        if headers.get(b"if-none-match") == _ETAG:
            await _respond(send, 304, b"")
        else:
            await _respond(send, 200, _POLICY_BODY, [(b"etag", _ETAG)])
    elif path == "/healthz":
        await _respond(send, 200, json.dumps(COUNTERS).encode())
    else:
        await _respond(send, 404, b'{"error":{"code":"not_found"}}')


async def _websocket(scope: Scope, receive: Receive, send: Send) -> None:
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    COUNTERS["sockets"] += 1
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            frame = json.loads(message.get("text") or "{}")
            if frame.get("type") == "hello":
                known = frame.get("policy_version") == _DOCUMENT["version"]
                await send(
                    {"type": "websocket.send", "text": _UP_TO_DATE if known else _POLICY_FRAME}
                )
            elif frame.get("type") == "ack":
                COUNTERS["acks"] += 1
    finally:
        COUNTERS["sockets"] -= 1


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI entry point."""
    if scope["type"] == "http":
        await _http(scope, receive, send)
    elif scope["type"] == "websocket":
        await _websocket(scope, receive, send)
