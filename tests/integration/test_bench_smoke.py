"""Every benchmark of bench/ (bench/README.md) still runs: each through its own command line, at
a tiny size, against the suite's PostgreSQL server and Redis database.

A benchmark that no longer runs is a figure nobody can stand behind any more (issue 22: the
fan-out stopped at its second repetition, the lab at its first row). The figures of these runs
mean nothing and are not checked: each run must end with exit code 0 (bench/sdk: 1 is its
"target missed" verdict, which a tiny run on a shared machine may give) and print the line
that carries its result.

The benches create their own databases on the suite's server, named with a suffix of the
suite's database (bench/__init__.py: BENCH_PG_URL, BENCH_DB_SUFFIX), as copies of one database
migrated once here (BENCH_TEMPLATE_DB), and use the suite's Redis database (BENCH_REDIS_URL);
all of them are dropped at the end.
"""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

import bench

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300


def _benches(out: Path) -> dict[str, tuple[list[str], str]]:
    """Each bench's tiny command line (after `python -m`) and the text its result line has."""
    return {
        "alerts": (["bench.alerts", "--events", "1000", "--reps", "2"], "ratio ours / baseline"),
        "autopilot": (
            [
                *("bench.autopilot", "--cycles", "3", "--warmup", "1", "--tasks", "600"),
                *("--devices", "20", "--out", str(out / "autopilot.json")),
            ],
            "autopilot bench: done",
        ),
        "dashboard": (
            [
                *("bench.dashboard", "--events", "2000", "--reps", "2", "--raw-reps", "1"),
                *("--json", str(out / "dashboard.json")),
            ],
            "24 h dashboard over 2,000 events",
        ),
        "fanout": (
            [
                *("bench.fanout", "--devices", "20", "--reps", "1", "--client-processes", "1"),
                *("--timeout", "200", "--json", str(out / "fanout.json")),
            ],
            "reconnect n=20: all 20 hold their assignment",
        ),
        "guards": (
            [
                *("bench.guards", "--aa", "1", "--ab", "1", "--seeds", "1", "--workers", "1"),
                *("--devices", "20", "--minutes", "2", "--out", str(out / "guards.json")),
            ],
            '"summary"',
        ),
        "ingest": (
            [
                *("bench.ingest", "--events", "1000", "--devices", "4", "--connections", "2"),
                *("--web-workers", "1", "--worker-concurrency", "1", "--query-events", "2000"),
                *("--out", str(out / "ingest.json")),
            ],
            "percentile_cont",
        ),
        "lab": (
            [
                *("bench.lab", "--events", "1000", "--repeat", "1", "--no-tracemalloc"),
                *("--what", "backtest", "calibration", "--out", str(out / "lab.json")),
            ],
            "self-check: agreement 1.0000",
        ),
        "mqtt": (
            [
                *("bench.mqtt", "--devices", "20", "--reps", "1", "--timeout", "120"),
                *("--json", str(out / "mqtt.json")),
            ],
            "publishes per change",
        ),
        "sdk": (["bench.sdk", "--tasks", "200", "--rounds", "2"], "Router.route"),
        "wire": (["bench.wire", "--rounds", "1", "--loops", "2"], "ours / baseline"),
        "wire-protobuf": (
            [
                *("bench.wire.protobuf", "--events", "1000", "--ingest-rounds", "1"),
                *("--rounds", "1", "--loops", "2", "--devices", "4"),
                *("--json", str(out / "wire-protobuf.json")),
            ],
            "ingest, best round: protobuf",
        ),
        "sim": (
            [
                *("bench.sim", "--devices", "10", "--measure", "2", "--connect-rate", "100"),
                *("--json", str(out / "sim.json")),
            ],
            "sim/bare CPU",
        ),
    }


BENCH_NAMES = sorted(_benches(Path()))


def _drop_bench_databases(suffix: str) -> None:
    with psycopg.connect(bench.admin_url(), autocommit=True, connect_timeout=10) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT datname FROM pg_database WHERE left(datname, 5) = 'bench' "
                "AND right(datname, %s) = %s",
                (len(suffix), suffix),
            )
        ]
        for name in names:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="module")
def bench_env() -> Iterator[dict[str, str]]:
    """The environment of the benches' runs, with a migrated template database."""
    database_url = os.environ.get("DATABASE_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    if not database_url.startswith("postgres") or not redis_url:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but PostgreSQL or Redis is not configured")
        pytest.skip("the benches need PostgreSQL and Redis (DATABASE_URL, REDIS_URL)")
    suffix = "_smoke_" + urlsplit(database_url).path.strip("/")
    env = {
        **os.environ,
        "BENCH_PG_URL": database_url,
        "BENCH_DB_SUFFIX": suffix,
        "BENCH_REDIS_URL": redis_url,
    }
    template = f"bench_template{suffix}"
    with mock.patch.dict(os.environ, env):
        bench.database_recreate(template)
        bench.migrate(
            {
                "DATABASE_URL": bench.url_of(template),
                "REDIS_URL": "",
                "SECRET_KEY": "bench-smoke",
                "DEBUG": "0",
                "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            }
        )
    try:
        yield {**env, "BENCH_TEMPLATE_DB": template}
    finally:
        with mock.patch.dict(os.environ, env):
            _drop_bench_databases(suffix)


@pytest.mark.parametrize("name", BENCH_NAMES)
def test_bench__tiny_run__ends_with_its_result(
    name: str, bench_env: dict[str, str], tmp_path: Path
) -> None:
    # Given the bench's command line at a tiny size, writing its files under tmp_path
    command, result_text = _benches(tmp_path)[name]

    # When it runs as a developer runs it
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=REPO_ROOT,
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    seconds = time.monotonic() - began

    # Then it ends normally and prints its result
    output = done.stdout + done.stderr
    allowed = (0, 1) if name == "sdk" else (0,)
    assert done.returncode in allowed, f"bench.{name} exit {done.returncode}:\n{output[-4000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    assert result_text in output, f"bench.{name} ({seconds:.0f} s) printed:\n{output[-4000:]}"
