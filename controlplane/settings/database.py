"""The database: PostgreSQL from DATABASE_URL, else the embedded mode's SQLite file in var/."""

from controlplane.settings.env import DATABASE_URL, VAR_DIR, env

if DATABASE_URL:
    DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    DATABASES["default"].setdefault("CONN_MAX_AGE", 0)
    # A psycopg connection pool per process (opt-in): under ASGI every request otherwise opens
    # a new PostgreSQL connection (~4 ms), which dominates small hot requests such as telemetry.
    DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=0)
    # Hot reads planned once per connection (controlplane/prepared.py); off behind a pooler in
    # transaction mode, where a statement prepared on one server connection is not on the next.
    DATABASE_PREPARED_READS = env.bool("DATABASE_PREPARED_READS", default=True)
    if DATABASE_POOL_MAX_SIZE > 0 and DATABASES["default"]["ENGINE"].endswith("postgresql"):
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses persistent connections + pool
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_MAX_SIZE,
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env.str("SQLITE_PATH", default=str(VAR_DIR / "db.sqlite3")),
            # IMMEDIATE: a write transaction takes the lock when it begins, so concurrent
            # writers (device enrolments of a simulated fleet) wait for it instead of failing
            # at once with "database is locked"; WAL lets readers go on beside the writer.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL;",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
