"""Benchmarks (run by hand, see bench/README.md; a tiny run of each is in the test suite,
tests/integration/test_bench_smoke.py).

Where they keep their data: each one drops and re-creates its own database on the PostgreSQL
server of `BENCH_PG_URL` (default: the root database on 127.0.0.1), named `bench_<name>`
followed by `BENCH_DB_SUFFIX` (default empty), so that two runs on one server (the suite's, a
developer's) never share one; a bench that needs a Redis database of the shared server takes
`BENCH_REDIS_URL` when it is set.
"""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PG_URL = "postgres://root@127.0.0.1:5432/root"
REPO_ROOT = Path(__file__).resolve().parents[1]


def admin_url() -> str:
    """A database of the server the benches create theirs on (to DROP and CREATE them)."""
    return os.environ.get("BENCH_PG_URL") or DEFAULT_PG_URL


def database_name(name: str) -> str:
    """The database a bench calls `name`, with this run's suffix."""
    return name + os.environ.get("BENCH_DB_SUFFIX", "")


def database_url(name: str) -> str:
    """The URL of the bench's own database `name` (with the suffix) on that server."""
    return url_of(database_name(name))


def url_of(database: str) -> str:
    """The URL of `database` (its exact name) on that server."""
    return urlunsplit(urlsplit(admin_url())._replace(path="/" + database))


def redis_url(default: str) -> str:
    """The Redis database a bench uses: `BENCH_REDIS_URL`, else its own default."""
    return os.environ.get("BENCH_REDIS_URL") or default


def database_recreate(database: str) -> bool:
    """Drop and create `database` (a bench's own: its name starts with `bench`) on that
    server. With `BENCH_TEMPLATE_DB` set (a migrated database of the same tree nobody is
    connected to, as the suite's smoke run makes once) it is created as a copy of that one and
    True is returned: already migrated. Else it is empty and the caller migrates it."""
    import psycopg
    from psycopg import sql

    if not database.startswith("bench"):
        raise ValueError(
            f"refusing to drop {database!r}: a bench database's name starts with bench"
        )
    template = os.environ.get("BENCH_TEMPLATE_DB", "")
    with psycopg.connect(admin_url(), autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database))
        if template:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(create)
    return bool(template)


def migrate(env: dict[str, str]) -> None:
    """`manage.py migrate` in a subprocess with the bench's environment."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        check=True,
    )
