"""Fixtures for telemetry tests: an API client holding the token of the enrolled device `phone`
(tests/unit/conftest.py, shared with the lab's tests)."""

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core import signals
from django.db import close_old_connections
from django.test import override_settings
from rest_framework.test import APIClient


class AsgiResponse:
    """An ASGI answer, read like the test client's response."""

    def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)

    def __getitem__(self, name: str) -> str:
        return self.headers[name.lower()]


class AsgiClient:
    """Requests through `controlplane.asgi.application`, as uvicorn makes them: the telemetry
    fast path (telemetry/ingest/fastpath.py) and, for what it leaves to Django, Django's ASGI
    handler. Same calls as APIClient; the application runs its database work on this thread,
    in the test's transaction."""

    def __init__(self) -> None:
        self.authorization: str | None = None

    def credentials(self, HTTP_AUTHORIZATION: str) -> None:  # APIClient's name
        self.authorization = HTTP_AUTHORIZATION

    def post(self, url: str, data: Any, format: str = "json") -> AsgiResponse:
        return self.generic("POST", url, json.dumps(data), content_type="application/json")

    def generic(
        self,
        method: str,
        url: str,
        body: bytes | str,
        content_type: str = "",
        headers: dict[str, str] | None = None,
    ) -> AsgiResponse:
        from controlplane.asgi import application

        payload = body.encode() if isinstance(body, str) else body
        extra = headers or {}
        headers = [
            (b"host", b"testserver"),
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(payload)).encode()),
        ]
        if self.authorization is not None:
            headers.append((b"authorization", self.authorization.encode()))
        headers.extend((name.lower().encode(), value.encode()) for name, value in extra.items())
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": url,
            "raw_path": url.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("testserver", 80),
        }
        sent: list[dict[str, Any]] = []
        received = False

        async def receive() -> dict[str, Any]:
            nonlocal received
            if not received:
                received = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.Event().wait()  # no disconnect while the app answers
            return {"type": "http.disconnect"}  # pragma: no cover

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        # As Django's test client does: connections stay open inside the test's transaction.
        # Django's own thread (this one) runs the database part, in the test's transaction.
        signals.request_started.disconnect(close_old_connections)
        signals.request_finished.disconnect(close_old_connections)
        try:
            with override_settings(TELEMETRY_INGEST_THREADS=0):
                async_to_sync(application)(scope, receive, send)
        finally:
            signals.request_started.connect(close_old_connections)
            signals.request_finished.connect(close_old_connections)
        start = next(m for m in sent if m["type"] == "http.response.start")
        content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        answer_headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
        return AsgiResponse(start["status"], answer_headers, content)


@pytest.fixture(params=["drf", "asgi"])
def phone_client(request: pytest.FixtureRequest, phone: tuple[Any, str]) -> Any:
    """A client authenticated as `phone-1`: DRF's test client (the view) or through the ASGI
    application (the fast path), so every ingest test checks both answer alike."""
    client = APIClient() if request.param == "drf" else AsgiClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {phone[1]}")
    return client
