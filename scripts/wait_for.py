"""Wait until PostgreSQL, Redis or an HTTP URL answers; exit 1 when not within the timeout."""

import argparse
import sys
import time


def _postgres_ok(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _redis_ok(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


def _http_ok(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (our own URL)
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def main() -> int:
    """Poll the named service until it answers or the timeout passes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres")
    parser.add_argument("--redis")
    parser.add_argument("--http", help="a URL that must answer 200 (e.g. the server's /healthz)")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    while True:
        ok = (
            (not args.postgres or _postgres_ok(args.postgres))
            and (not args.redis or _redis_ok(args.redis))
            and (not args.http or _http_ok(args.http))
        )
        if ok:
            return 0
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
