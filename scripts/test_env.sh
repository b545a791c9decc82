# Sourced by `make test`: point the suite at the real PostgreSQL and Redis on 127.0.0.1.
# Under CI=true a missing service is an error, never a reason to skip.
PG_URL=${PG_URL:-postgres://root@127.0.0.1:5432/root}
REDIS_TEST_URL=${REDIS_TEST_URL:-redis://127.0.0.1:6379/15}
export SECRET_KEY=${SECRET_KEY:-tests-only-secret}
export DEBUG=0
# The suite's clients, live servers and Chromium speak plain http to 127.0.0.1 (no redirect to
# https, cookies not Secure): the production HTTPS settings are tested by check --deploy.
export HTTPS=0

if .venv/bin/python scripts/wait_for.py --postgres "$PG_URL" --timeout 5; then
  export DATABASE_URL=${DATABASE_URL:-$PG_URL}
elif [ "${CI:-}" = "true" ]; then
  echo "FATAL: PostgreSQL is not reachable at $PG_URL and CI=true; refusing to skip its tests." >&2
  exit 1
else
  echo "WARNING: PostgreSQL not reachable at $PG_URL; tests that need it are skipped." >&2
fi
if .venv/bin/python scripts/wait_for.py --redis "$REDIS_TEST_URL" --timeout 5; then
  export REDIS_URL=${REDIS_URL:-$REDIS_TEST_URL}
elif [ "${CI:-}" = "true" ]; then
  echo "FATAL: Redis is not reachable at $REDIS_TEST_URL and CI=true; refusing to skip its tests." >&2
  exit 1
else
  echo "WARNING: Redis not reachable at $REDIS_TEST_URL; tests that need it are skipped." >&2
fi
