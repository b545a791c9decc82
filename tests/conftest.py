"""Shared fixtures: users per role, API clients, a published fleet; outbound network blocked."""

import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from controlplane.roles import Role
from tests.factories import UserFactory, make_fleet

ON_CI = os.environ.get("CI") == "true"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under CI, a test marked as needing PostgreSQL or Redis must have it: fail, never skip."""
    if not ON_CI:
        return
    missing = []
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        missing.append("PostgreSQL (DATABASE_URL)")
    if not os.environ.get("REDIS_URL"):
        missing.append("Redis (REDIS_URL)")
    if missing:
        raise pytest.UsageError(
            f"CI=true but {', '.join(missing)} not configured; refusing to skip."
        )


@pytest.fixture
def requires_postgres(db: None) -> None:
    """Skip (locally) or fail (CI) unless the database is PostgreSQL."""
    if connection.vendor != "postgresql":
        if ON_CI:
            pytest.fail("CI=true but the database is not PostgreSQL")
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture(autouse=True)
def _block_outbound_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests talk to loopback only; anything else is a bug in the test."""
    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (
            host.startswith("127.") or host in {"localhost", "::1"} or host.startswith("/")
        ):
            raise RuntimeError(f"test tried to reach {address!r}; only loopback is allowed")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    """Build a user with a role: `make_user(Role.EDITOR)`."""

    def _make(role: Role | None = None, **kwargs: Any) -> Any:
        return UserFactory(role=role, **kwargs)

    return _make


@pytest.fixture
def viewer(make_user: Callable[..., Any]) -> Any:
    return make_user(Role.VIEWER, username="viewer")


@pytest.fixture
def editor(make_user: Callable[..., Any]) -> Any:
    return make_user(Role.EDITOR, username="editor")


@pytest.fixture
def publisher(make_user: Callable[..., Any]) -> Any:
    return make_user(Role.PUBLISHER, username="publisher")


@pytest.fixture
def api_client() -> APIClient:
    """An anonymous API client."""
    return APIClient()


@pytest.fixture
def client_as() -> Callable[[Any], APIClient]:
    """`client_as(user)`: an API client authenticated as that user (session, as the browser)."""

    def _client(user: Any) -> APIClient:
        client = APIClient()
        client.force_authenticate(user=user)
        return client

    return _client


@pytest.fixture
def fleet(db: None, publisher: Any) -> Any:
    """A fleet with the demo's 12 cells, published as v1 by `publisher`, no draft."""
    return make_fleet(actor=publisher)


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: Any) -> None:
    """PBKDF2 costs ~0.2 s a user; tests create hundreds. Logins work the same with MD5."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- gray release and devices ----------------------------------------------------------------


@pytest.fixture
def publish_version(publisher: Any) -> Callable[..., Any]:
    """`publish_version(fleet, threshold=0.7)`: a draft of the latest version with one θ changed,
    published as the next number (the fleet's stable version does not move)."""
    from routing_policies.services import (
        policy_draft_create,
        policy_draft_update_cells,
        policy_version_publish,
    )

    def _publish(fleet: Any, threshold: float = 0.7) -> Any:
        draft = policy_draft_create(actor=publisher, fleet=fleet)
        policy_draft_update_cells(
            actor=publisher,
            fleet=fleet,
            revision=draft.revision,
            edits=[
                {
                    "task_type": "voice",
                    "latency_budget": "interactive",
                    "privacy_tier": "normal",
                    "values": {"threshold": threshold},
                }
            ],
        )
        return policy_version_publish(
            actor=publisher, fleet=fleet, revision=draft.revision + 1, note=f"θ {threshold}"
        )

    return _publish


@pytest.fixture
def fleet_key(fleet: Any, publisher: Any) -> str:
    """`fleet`'s enrolment key (shown once when issued)."""
    from routing_policies.services import fleet_enrollment_key_rotate

    return fleet_enrollment_key_rotate(actor=publisher, fleet=fleet)


@pytest.fixture
def background() -> Iterator[Any]:
    """An asyncio loop on a thread of its own (`BackgroundLoop`), for clients that the
    synchronous tests drive: simulated fleets, SDK devices, WebSocket clients."""
    from tests.integration.ws_clients import BackgroundLoop

    with BackgroundLoop() as loop:
        yield loop
