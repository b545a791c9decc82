"""Benchmarks (run by hand, see bench/README.md; a tiny run of each is in the test suite,
tests/integration/test_bench_smoke.py).

Where they keep their data: each one drops and re-creates its own database on the PostgreSQL
server of `BENCH_PG_URL` (default: the root database on 127.0.0.1), named `bench_<name>`
followed by `BENCH_DB_SUFFIX` (default empty), so that two runs on one server (the suite's, a
developer's) never share one; a bench that needs a Redis database of the shared server takes
`BENCH_REDIS_URL` when it is set.
"""

import os
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PG_URL = "postgres://root@127.0.0.1:5432/root"


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
