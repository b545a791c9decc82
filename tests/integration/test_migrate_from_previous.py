"""Data survives the moves: a database filled by an earlier main migrates to the head intact.

The earlier main (BASE_REF, the last commit before the parts were moved between apps) is taken
out of git into a temporary folder, migrated, seeded with the demo and fed by its own simulated
fleet, a backtest and an alert rule; then the head's migrations run on the same database. Every
table and every column the earlier main had must still hold the same rows (a model that changed
app keeps its table, or RENAMED_TABLES says where it went), and the head must read them.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from django.conf import settings

from .embedded import REPO_ROOT

pytestmark = pytest.mark.integration

# The last main that landed before the walls moved (issue 23): a deployed database's schema.
BASE_REF = "79a5528f"
# A table the head renamed: old name → new name (empty while every moved model keeps its table).
RENAMED_TABLES: dict[str, str] = {}
# Tables whose rows may legitimately change when the head migrates (Django's own bookkeeping).
BOOKKEEPING = {"django_migrations", "django_content_type", "auth_permission", "django_session"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _admin_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/postgres"


@pytest.fixture
def scratch_database(requires_postgres: None) -> Iterator[str]:
    """A database of its own (not the test database), dropped afterwards."""
    name = f"migrate_from_previous_{os.getpid()}"
    with psycopg.connect(_admin_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    db = settings.DATABASES["default"]
    yield f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"
    with psycopg.connect(_admin_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def base_checkout(tmp_path: Path) -> Path:
    """The earlier main's files (git archive: no work tree, no registry entry)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", BASE_REF],
        cwd=REPO_ROOT,
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.fail(f"git archive {BASE_REF} failed: {archive.stderr.decode()[:300]}")
    target = tmp_path / "base"
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


def _environment(database_url: str, var_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"REDIS_URL", "DATABASE_URL", "PYTHONPATH", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        DATABASE_URL=database_url,
        SECRET_KEY="tests-only-secret",
        DEBUG="0",
        HTTPS="0",
        VAR_DIR=str(var_dir),
        LOG_LEVEL="WARNING",
    )
    return env


def _manage(cwd: Path, env: dict[str, str], *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result.stdout


def _fill_with_the_base(base: Path, env: dict[str, str]) -> None:
    """The earlier main as a user left it: demo, a simulated fleet's traffic, a backtest."""
    _manage(base, env, "migrate", "--noinput", "-v0")
    _manage(base, env, "seed_demo", "-v0")
    port = _free_port()
    server = subprocess.Popen(
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
            "--log-level",
            "warning",
        ],
        cwd=base,
        env=env,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            pytest.fail("the earlier main's server did not answer /healthz within 60 s")
        _manage(
            base,
            env,
            "simulate_fleet",
            "--url",
            url,
            "--devices",
            "6",
            "--rate",
            "12",
            "--duration",
            "8",
            "--connect-rate",
            "50",
            timeout=120,
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    _manage(base, env, "backtest", "voice-assistant-android", "--subject", "1", "--hours", "1")


def _snapshot(database_url: str) -> dict[str, tuple[list[str], int, str]]:
    """Per table: its columns, its row count and a digest of its rows (ordered)."""
    found: dict[str, tuple[list[str], int, str]] = {}
    with psycopg.connect(database_url.replace("postgres://", "postgresql://")) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
            )
        ]
        for table in tables:
            columns = [
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                    [table],
                )
            ]
            found[table] = (columns, *_digest(conn, table, columns))
    return found


def _digest(conn: Any, table: str, columns: list[str]) -> tuple[int, str]:
    listed = ", ".join(f'"{name}"::text' for name in columns)
    rows = conn.execute(f'SELECT {listed} FROM "{table}"').fetchall()
    # Sorted here, once: an ORDER BY on a few text columns is not a total order
    digest = hashlib.sha256(repr(sorted(rows, key=repr)).encode()).hexdigest()
    return len(rows), digest


def test_migrate__database_of_the_earlier_main__every_row_survives(
    scratch_database: str, base_checkout: Path, tmp_path: Path
) -> None:
    # Given a database the earlier main created, seeded and filled with a fleet's traffic
    env = _environment(scratch_database, tmp_path / "var")
    _fill_with_the_base(base_checkout, env)
    before = _snapshot(scratch_database)
    events_before = before["telemetry_event"][1] if "telemetry_event" in before else 0
    assert events_before > 0, "the earlier main's simulated fleet stored no events"

    # When the head's migrations run on it
    _manage(REPO_ROOT, env, "migrate", "--noinput", "-v0")

    # Then every table and column the earlier main had holds the same rows
    with psycopg.connect(scratch_database.replace("postgres://", "postgresql://")) as conn:
        for table, (columns, count, digest) in before.items():
            if table in BOOKKEEPING or table.startswith("telemetry_event_p"):
                continue
            now_table = RENAMED_TABLES.get(table, table)
            assert _digest(conn, now_table, columns) == (count, digest), table
    # ... and the head reads them through its models
    output = _manage(
        REPO_ROOT,
        env,
        "shell",
        "-c",
        "from routing_policies.models import PolicyVersion; from telemetry.models import Event;"
        " print('counts', PolicyVersion.objects.count(), Event.objects.count())",
    )
    counts = next(line for line in output.splitlines() if line.startswith("counts ")).split()[1:]
    assert int(counts[0]) == before["routing_policies_policyversion"][1]
    assert int(counts[1]) == events_before
