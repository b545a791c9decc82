"""`POST /api/v1/telemetry` served in front of Django: the hot path of ingest.

Devices post a batch every few seconds each, so the fixed cost of a request counts: Django's
middleware stack, DRF's request wrapping, content negotiation and the device-token query cost
several milliseconds per batch, more than validating 500 events. `TelemetryIngestApp` wraps the
Django ASGI application and answers exactly this path and method itself: it reads the body,
authenticates the bearer token (`device_authenticate_cached`), counts the rate limit, and calls
the same service as the DRF view (`services.telemetry_batch_ingest`), whose 202 still comes
only after the landing transaction has committed. Each answer is the one the DRF view gives
(`ingest_outcome` is shared by both), with the headers the middleware would add.

Whatever it does not answer itself goes to Django unchanged, with the body it has read replayed:
other paths and methods, a Host outside ALLOWED_HOSTS, a Content-Length over the limit (the
middleware's 413), a missing or bad token (DRF's 401 with its WWW-Authenticate). The DRF view
stays registered: it documents the endpoint in the OpenAPI schema and serves it when the app
runs without this wrapper (Django's test client, `runserver`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import msgspec
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signals
from django.http.request import split_domain_port, validate_host

from controlplane.exceptions import ApplicationError, error_body
from routing_policies.models import Device
from routing_policies.services import device_authenticate_cached

from ..ratelimit import Outcome, device_batch_gate
from . import services
from .events import BatchTooLarge
from .wire import ACCEPTS, BodyFormat, BodyRefused, batch_json

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Any, Any, Any], Awaitable[None]]  # Django's handler types its own way

PATH: Final = "/api/v1/telemetry"
# What Django's middleware (SecurityMiddleware, XFrameOptionsMiddleware) and DRF's APIView add
# to this view's answers with the project's settings.
_HEADERS: Final = (
    (b"content-type", b"application/json"),
    (b"vary", b"Accept"),
    (b"allow", b"POST, OPTIONS"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    *((name.lower().encode(), value.encode()) for name, value in ACCEPTS.items()),
)
_ENCODER: Final = msgspec.json.Encoder()


def _too_large(message: str) -> Outcome:
    return 413, error_body("payload_too_large", message), {}


def ingest_outcome(
    device: Device,
    body: bytes | None,
    body_format: BodyFormat | None = None,
    *,
    channel: str = "http",
) -> Outcome:
    """(status, JSON body, headers) of a device's batch; `body` None means it was too large.

    Shared by the DRF view and the fast path so that both answer alike. Order: the rate limit
    (429), the size (413), validation (400 naming each bad event and field, or 413 over 1,000
    events), then the landing: 202 once committed. A protobuf or compressed body (`body_format`)
    is read as the JSON batch it stands for (`wire.batch_json`), refused first when it is none.
    """
    refused = device_batch_gate(device.token_hash[:32], body)
    if refused is not None:
        return refused
    assert body is not None
    read: list[Any] | None = None
    columns = None
    if body_format is not None:
        try:
            body, read, columns = batch_json(body, body_format, channel=channel)
        except BodyRefused as exc:
            return exc.outcome
    try:
        result = services.telemetry_batch_ingest(
            device=device, body=body, read=read, columns=columns
        )
    except BatchTooLarge as exc:
        return _too_large(str(exc))
    except ApplicationError as exc:
        return exc.status_code, error_body(exc.code, exc.message, exc.details), {}
    return 202, {"accepted": result.accepted, "duplicates": result.duplicates}, {}


def _bearer_token(headers: dict[bytes, bytes]) -> str | None:
    """The token of `Authorization: Bearer <token>`, as DeviceTokenAuthentication reads it."""
    try:
        header = headers.get(b"authorization", b"").decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover  # latin-1 decodes every byte
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _handle(token: str, body: bytes | None, body_format: BodyFormat | None) -> Outcome | None:
    """The synchronous part (database, Redis), run as Django runs a request; None: not ours."""
    signals.request_started.send(sender=TelemetryIngestApp)
    try:
        device = device_authenticate_cached(token)
        if device is None:
            return None  # DRF answers the 401
        return ingest_outcome(device, body, body_format)
    finally:
        # Closes (returns to the pool) the database connection, as after any Django request.
        signals.request_finished.send(sender=TelemetryIngestApp)


class TelemetryIngestApp:
    """ASGI: the telemetry ingest path answered here, everything else by `django_app`."""

    def __init__(self, django_app: AsgiApp) -> None:
        self.django_app = django_app
        self._executor: ThreadPoolExecutor | None = None

    async def _run(
        self, token: str, body: bytes | None, body_format: BodyFormat | None
    ) -> Outcome | None:
        """`_handle` on one of TELEMETRY_INGEST_THREADS threads, each with its own database
        connection, so that several batches are landed (and wait for their commit) at once; with
        0, on the one thread where Django runs sync views (as the DRF view would)."""
        threads: int = settings.TELEMETRY_INGEST_THREADS
        if threads <= 0:
            return await sync_to_async(_handle, thread_sensitive=True)(token, body, body_format)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(threads, thread_name_prefix="telemetry-ingest")
        run = sync_to_async(_handle, thread_sensitive=False, executor=self._executor)
        return await run(token, body, body_format)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.django_app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        limit: int = settings.MAX_REQUEST_BYTES
        token = _bearer_token(headers)
        if token is None or not self._host_allowed(headers) or _declared_length(headers) > limit:
            await self.django_app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more and size <= limit:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if more:  # over the limit without a Content-Length: Django reads the rest
            await self.django_app(scope, _replay(body, True, receive), send)
            return
        body_format = BodyFormat.of(
            headers.get(b"content-type", b"").decode("latin-1"),
            headers.get(b"content-encoding", b"").decode("latin-1"),
        )
        outcome = await self._run(token, body if size <= limit else None, body_format)
        if outcome is None:
            await self.django_app(scope, _replay(body, False, receive), send)
            return
        status, data, extra = outcome
        content = _ENCODER.encode(data)
        response_headers = [
            *_HEADERS,
            (b"content-length", str(len(content)).encode()),
            *((name.lower().encode(), value.encode()) for name, value in extra.items()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": content})

    @staticmethod
    def _host_allowed(headers: dict[bytes, bytes]) -> bool:
        """ALLOWED_HOSTS as Django checks it (anything unusual is left to Django)."""
        host = headers.get(b"host")
        if host is None or settings.USE_X_FORWARDED_HOST:
            return False
        domain, _ = split_domain_port(host.decode("latin-1"))
        return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


def _declared_length(headers: dict[bytes, bytes]) -> int:
    try:
        return int(headers.get(b"content-length", b"0"))
    except ValueError:
        return 0


def _replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A `receive` that first gives back the body read so far, then the client's own."""
    replayed = False

    async def replaying_receive() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replaying_receive
