"""A real ASGI server (uvicorn, as in production) over the pytest-django test database.

End-to-end and integration tests talk to it over HTTP and WebSockets. The server is a separate
process, so it only sees committed data: tests that use it need `transactional_db`. Usage:

    from tests.live_server import asgi_server  # noqa: F401  (a session-scoped fixture)

    def test_something(asgi_server: str, transactional_db: None) -> None:
        httpx.get(f"{asgi_server}/healthz")

or, outside pytest fixtures, `with running_asgi_server(connection.settings_dict) as url: ...`.
"""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# An outer bound, not a guess: a server or worker answers as soon as it is up (a few seconds on
# a quiet machine); on a loaded 2-core machine importing Django alone can take half a minute.
STARTUP_TIMEOUT_S = 120.0


def skip_or_fail(message: str) -> NoReturn:
    """A real service the test needs is missing: skip it, or fail under CI=true (no skips)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)


def require_postgres_and_redis(what: str) -> None:
    """Skip (fail under CI) unless the test database is PostgreSQL and REDIS_URL is set."""
    from django.db import connection

    if not os.environ.get("REDIS_URL") or "postgresql" not in connection.settings_dict["ENGINE"]:
        skip_or_fail(f"{what} needs PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)")


def empty_test_redis() -> None:
    """Empty this run's Redis database (`REDIS_URL`), so no task or key of an earlier test is
    left; without Redis the test is skipped, and under CI=true it fails instead."""
    url = os.environ.get("REDIS_URL")
    if not url:
        skip_or_fail("needs Redis (set REDIS_URL)")
    import redis

    redis.Redis.from_url(url).flushdb()


def session_cookie(user: Any) -> str:
    """The session cookie of `user` logged in, for a browser socket or page of a live server."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_in_memory(settings_dict: dict[str, Any]) -> bool:
    """True for SQLite test databases that live in this process's memory only."""
    name = str(settings_dict.get("NAME") or "")
    return "sqlite3" in settings_dict["ENGINE"] and (name == ":memory:" or "mode=memory" in name)


def server_environment(settings_dict: dict[str, Any]) -> dict[str, str]:
    """The server's environment: the test database, production-like settings, Redis if any."""
    env = dict(os.environ)
    engine = settings_dict["ENGINE"]
    if "postgresql" in engine:
        user = quote(settings_dict.get("USER") or "", safe="")
        password = settings_dict.get("PASSWORD") or ""
        credentials = f"{user}:{quote(password, safe='')}@" if password else f"{user}@"
        host = settings_dict.get("HOST") or "127.0.0.1"
        port = settings_dict.get("PORT") or "5432"
        env["DATABASE_URL"] = f"postgres://{credentials}{host}:{port}/{settings_dict['NAME']}"
        env.pop("SQLITE_PATH", None)
    elif "sqlite3" in engine:
        # Only a file database can be shared with another process (not ":memory:").
        if is_in_memory(settings_dict):
            raise RuntimeError("an in-memory SQLite test database cannot be shared with a server")
        env.pop("DATABASE_URL", None)
        env["SQLITE_PATH"] = str(settings_dict["NAME"])
    else:
        raise RuntimeError(f"no live server for database engine {engine!r}")
    env.update(
        {
            "SECRET_KEY": os.environ.get("SECRET_KEY") or "tests-only-secret",
            "DEBUG": "0",
            "HTTPS": "0",  # plain http on 127.0.0.1: no https redirect, cookies not Secure
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    if os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = os.environ["REDIS_URL"]
    return env


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


@contextmanager
def running_asgi_server(settings_dict: dict[str, Any]) -> Iterator[str]:
    """Start uvicorn on a free port, wait for /healthz, yield the base URL, then stop it."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in the finally below)
        prefix="asgi-server-", suffix=".log", delete=False
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "controlplane.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "off",
        ],
        cwd=REPO_ROOT,
        env=server_environment(settings_dict),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _answers(f"{base_url}/healthz"):
            if process.poll() is not None:
                output = Path(log.name).read_text(errors="replace")
                pytest.fail(
                    f"the ASGI server exited with code {process.returncode} before answering:\n"
                    f"{output}"
                )
            if time.monotonic() > deadline:
                output = Path(log.name).read_text(errors="replace")
                pytest.fail(
                    f"the ASGI server did not answer /healthz within {STARTUP_TIMEOUT_S:.0f} s:\n"
                    f"{output}"
                )
            time.sleep(0.1)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="session")
def asgi_server(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """Base URL of a uvicorn process serving the test database (started once per session).

    It depends on `django_db_setup`, so it starts after the test database exists and stops
    before that database is dropped. Data must be committed to be seen: use `transactional_db`.
    """
    from django.db import connection

    if is_in_memory(connection.settings_dict):
        skip_or_fail("a live server needs a shared test database: set DATABASE_URL to PostgreSQL")
    with running_asgi_server(dict(connection.settings_dict)) as base_url:
        yield base_url
