# Sourced by `make test`: point the suite at the real PostgreSQL and Redis on 127.0.0.1.
# Under CI=true a missing service is an error, never a reason to skip.
PG_URL=${PG_URL:-postgres://root@127.0.0.1:5432/root}
REDIS_TEST_URL=${REDIS_TEST_URL:-redis://127.0.0.1:6379/15}
export SECRET_KEY=${SECRET_KEY:-tests-only-secret}
export DEBUG=0
# The suite's clients, live servers and Chromium speak plain http to 127.0.0.1 (no redirect to
# https, cookies not Secure): the production HTTPS settings are tested by check --deploy.
export HTTPS=0

# need NAME SERVICE URL VARIABLE: when the service answers at URL, the suite uses it (VARIABLE,
# unless already set); when it does not, its tests are skipped, and under CI=true that is fatal.
need() {
  if .venv/bin/python scripts/wait_for.py "--$2" "$3" --timeout 5; then
    export "$4=${!4:-$3}"
  elif [ "${CI:-}" = "true" ]; then
    echo "FATAL: $1 is not reachable at $3 and CI=true; refusing to skip its tests." >&2
    exit 1
  else
    echo "WARNING: $1 not reachable at $3; tests that need it are skipped." >&2
  fi
}
need PostgreSQL postgres "$PG_URL" DATABASE_URL
need Redis redis "$REDIS_TEST_URL" REDIS_URL
