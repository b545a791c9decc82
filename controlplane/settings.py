"""Settings, read from the environment (django-environ).

Two running modes:
- embedded (no DATABASE_URL / REDIS_URL): SQLite file, in-memory channel layer, Celery tasks
  run in-process, a secret key generated once in var/, plain http. For a newcomer's laptop
  (`make run`); tests do not rely on it.
- real services: PostgreSQL (psycopg 3), Redis channel layer and Celery broker; SECRET_KEY
  from the environment and HTTPS settings a deployment wants (docs/operations.md).
"""

from pathlib import Path

import django_stubs_ext
import environ
from django.core.exceptions import ImproperlyConfigured

from controlplane.embedded import embedded_secret_key

# Lets admin classes be subscripted at runtime (ModelAdmin[Fleet]) as the stubs want.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto: https` as Django's SECURE_PROXY_SSL_HEADER; None when empty."""
    if not value.strip():
        return None
    name, sep, expected = value.partition(":")
    if not sep or not name.strip() or not expected.strip():
        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER={value!r}: write it as `Header-Name: value`, or empty"
        )
    return "HTTP_" + name.strip().upper().replace("-", "_"), expected.strip()


# The embedded mode's files (SQLite database, secret key, static root, beat schedule).
VAR_DIR = BASE_DIR / env.str("VAR_DIR", default="var")

DEBUG = env.bool("DEBUG", default=False)
DATABASE_URL = env.str("DATABASE_URL", default="")
# HTTPS. A deployment (DATABASE_URL set, DEBUG off) serves HTTPS only, behind a TLS-terminating
# load balancer that sets X-Forwarded-Proto: these defaults are what it wants, and
# `manage.py check --deploy` is clean with them. HTTPS=0 is for what answers plain http on this
# machine (`make run`, `make test`, the compose demo, bench/): no redirect to https, cookies not
# marked Secure, no HSTS; the embedded mode (SQLite in var/) and DEBUG runs default to it.
HTTPS = env.bool("HTTPS", default=bool(DATABASE_URL) and not DEBUG)

# A deployment (HTTPS on) sets SECRET_KEY (docs/operations.md). Without HTTPS (the embedded
# mode, `make run` with real services, DEBUG runs) a key generated once on this machine and
# kept in var/secret_key serves every process and command there.
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if HTTPS:
        raise ImproperlyConfigured(
            "Set the SECRET_KEY environment variable (50 or more random characters)."
        )
    SECRET_KEY = embedded_secret_key(VAR_DIR)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# The HTTPS settings (docs/operations.md), each on by default with HTTPS.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=HTTPS)
# The balancer's health checks and the Prometheus scrape reach a process directly over http.
SECURE_REDIRECT_EXEMPT = env.list("SECURE_REDIRECT_EXEMPT", default=[r"^healthz$", r"^metrics$"])
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=HTTPS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=HTTPS)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
# `Header-Name: value` the balancer sets on requests that reached it over TLS (it must overwrite
# whatever a client sent); empty when the processes terminate TLS themselves or no proxy does.
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(
    env.str("SECURE_PROXY_SSL_HEADER", default="X-Forwarded-Proto: https")
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / Redoc served by us, never from a CDN
    "channels",
    "routing_policies",
    "telemetry",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "controlplane.static_files.StaticFilesMiddleware",  # WhiteNoise, streamed async under ASGI
    "controlplane.middleware.RequestSizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "controlplane.middleware.MethodNotAllowedMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "routing_policies.context_processors.roles",
            ],
        },
    },
]

if DATABASE_URL:
    DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    DATABASES["default"].setdefault("CONN_MAX_AGE", 0)
    # A psycopg connection pool per process (opt-in): under ASGI every request otherwise opens
    # a new PostgreSQL connection (~4 ms), which dominates small hot requests such as telemetry.
    DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=0)
    if DATABASE_POOL_MAX_SIZE > 0 and DATABASES["default"]["ENGINE"].endswith("postgresql"):
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses persistent connections + pool
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_MAX_SIZE,
        }
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
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

REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED = not REDIS_URL
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout by default, the same as the layer's
            # blocking pop: a consumer idle for 5 s then died with "Timeout reading".
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Embedded: a hostname in the in-memory URL, or kombu warns "No hostname was supplied" at start.
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"

# Alerts (docs/alerts.md): new rollups ask for an evaluation of their fleet at most once per
# ALERT_EVALUATE_COALESCE_S; the beat evaluates every fleet each ALERT_EVALUATE_INTERVAL_S (so
# silence is noticed). Webhooks: retried after BACKOFF × 2^(n − 1) s, capped, MAX_ATTEMPTS in all.
ALERT_EVALUATE_COALESCE_S = env.float("ALERT_EVALUATE_COALESCE_S", default=0.5)
ALERT_EVALUATE_INTERVAL_S = env.float("ALERT_EVALUATE_INTERVAL_S", default=15.0)
ALERT_WEBHOOK_BACKOFF_S = env.float("ALERT_WEBHOOK_BACKOFF_S", default=5.0)
ALERT_WEBHOOK_BACKOFF_MAX_S = env.float("ALERT_WEBHOOK_BACKOFF_MAX_S", default=600.0)
ALERT_WEBHOOK_MAX_ATTEMPTS = env.int("ALERT_WEBHOOK_MAX_ATTEMPTS", default=6)
ALERT_WEBHOOK_TIMEOUT_S = env.float("ALERT_WEBHOOK_TIMEOUT_S", default=5.0)
# Webhooks to loopback, private, link-local and other non-public addresses are refused unless
# this is set (telemetry/services/webhooks.py: the workers sit inside the network).
ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS = env.bool(
    "ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS", default=False
)

# Telemetry (docs/telemetry.md). Raw events are kept TELEMETRY_RETENTION_DAYS (and events
# older than that are refused); minute rollups and hour rollups longer.
TELEMETRY_RETENTION_DAYS = env.int("TELEMETRY_RETENTION_DAYS", default=7)
TELEMETRY_MINUTE_ROLLUP_RETENTION_DAYS = env.int(
    "TELEMETRY_MINUTE_ROLLUP_RETENTION_DAYS", default=30
)
TELEMETRY_HOUR_ROLLUP_RETENTION_DAYS = env.int("TELEMETRY_HOUR_ROLLUP_RETENTION_DAYS", default=400)
# Per device: at most this many batches per window (0 turns the limit off).
TELEMETRY_RATE_LIMIT_BATCHES = env.int("TELEMETRY_RATE_LIMIT_BATCHES", default=120)
TELEMETRY_RATE_LIMIT_WINDOW_S = env.int("TELEMETRY_RATE_LIMIT_WINDOW_S", default=60)
# One processing transaction takes up to this many landed batches.
TELEMETRY_PROCESS_MAX_BATCHES = env.int("TELEMETRY_PROCESS_MAX_BATCHES", default=20)
# A worker whose transaction found few batches waits this long before the next (fuller ones).
TELEMETRY_PROCESS_LINGER_S = env.float("TELEMETRY_PROCESS_LINGER_S", default=0.2)
# Threads per web process landing telemetry batches at once (0: Django's one sync thread).
TELEMETRY_INGEST_THREADS = env.int("TELEMETRY_INGEST_THREADS", default=4)
# Drains at once when landed batches pile up (the first wakes helpers; telemetry/wakeup.py).
TELEMETRY_DRAINS = env.int("TELEMETRY_DRAINS", default=2)
# Landed batches older than this are re-enqueued by the sweeper (their task was lost).
TELEMETRY_SWEEP_AFTER_S = env.float("TELEMETRY_SWEEP_AFTER_S", default=5.0)
TELEMETRY_SWEEP_INTERVAL_S = env.float("TELEMETRY_SWEEP_INTERVAL_S", default=10.0)
TELEMETRY_COMPACT_INTERVAL_S = env.float("TELEMETRY_COMPACT_INTERVAL_S", default=30.0)
# /metrics asks for `Authorization: Bearer <METRICS_TOKEN>` when set; open when empty.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# Live dashboards (telemetry/dashboard_feed.py): at most one push per fleet this often (a burst
# of batches is one or two updates); refresh open views this often anyway.
DASHBOARD_PUSH_DELAY_S = env.float("DASHBOARD_PUSH_DELAY_S", default=1.0)
# Each ASGI process re-reads its fleets' assignments this often and pushes what a lost Redis
# message left out (routing_policies/push.py); also at once when its subscription comes back.
PUSH_RECONCILE_S = env.float("PUSH_RECONCILE_S", default=60.0)
DASHBOARD_REFRESH_INTERVAL_S = env.float("DASHBOARD_REFRESH_INTERVAL_S", default=15.0)
CELERY_BEAT_SCHEDULE = {
    "telemetry-sweep-landed": {
        "task": "telemetry.sweep_landed",
        "schedule": TELEMETRY_SWEEP_INTERVAL_S,
        "options": {"expires": TELEMETRY_SWEEP_INTERVAL_S},
    },
    "telemetry-compact-rollups": {
        "task": "telemetry.compact_rollups",
        "schedule": TELEMETRY_COMPACT_INTERVAL_S,
        "options": {"expires": TELEMETRY_COMPACT_INTERVAL_S},
    },
    "telemetry-maintain-storage": {
        "task": "telemetry.maintain_storage",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    "telemetry-dashboard-refresh": {
        "task": "telemetry.dashboard_refresh",
        "schedule": DASHBOARD_REFRESH_INTERVAL_S,
        "options": {"expires": DASHBOARD_REFRESH_INTERVAL_S},
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Request bodies larger than this are refused with 413 before anything is parsed.
MAX_REQUEST_BYTES = env.int("MAX_REQUEST_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
DATA_UPLOAD_MAX_NUMBER_FIELDS = 5000

REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header makes an anonymous request a 401, not a 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["routing_policies.permissions.IsViewer"],
    # JSON only, through controlplane.json_guard: depth, NUL / lone surrogates and non-finite
    # numbers refused naming the field (a form or multipart body is a 415).
    "DEFAULT_PARSER_CLASSES": ["controlplane.parsers.GuardedJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.exceptions.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Edge routing control plane API",
    "DESCRIPTION": "Routing policy table, versions, diffs and audit log. Device protocol v1.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # API_DOCS_ACCESS below: logged-in users and API tokens, or everyone.
    "SERVE_PERMISSIONS": ["controlplane.api_docs.CanReadApiDocs"],
}
# Who reads /api/schema/ and /api/docs/ (controlplane/api_docs.py): `authenticated` (any
# logged-in user or API token) or `public`.
API_DOCS_ACCESS = env.str("API_DOCS_ACCESS", default="authenticated")
if API_DOCS_ACCESS not in ("authenticated", "public"):
    raise ImproperlyConfigured(
        f"API_DOCS_ACCESS={API_DOCS_ACCESS!r}: use `authenticated` (the default) or `public`"
    )

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's default config gives "django" a console handler of its own (with DEBUG on):
        # every line it logs was printed twice, once there and once by the root handler.
        "django": {"handlers": [], "level": LOG_LEVEL, "propagate": True},
        # django.request logs each 4xx as a warning, a refused role with a 30-line traceback:
        # they are answers to the client, not faults (the access log lists them). Server errors
        # (5xx) are logged with their traceback. django.security (CSRF, bad Host) still warns.
        "django.request": {"level": env.str("REQUEST_LOG_LEVEL", default="ERROR")},
    },
}

# Alerts: judge every fleet's rules and rollout guards on a beat (telemetry/alert_tasks.py).
CELERY_BEAT_SCHEDULE["alerts-evaluate-all"] = {
    "task": "telemetry.evaluate_all_alerts",
    "schedule": ALERT_EVALUATE_INTERVAL_S,
    "options": {"expires": ALERT_EVALUATE_INTERVAL_S},
}
