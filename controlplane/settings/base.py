"""Django itself: the secret key and HTTPS, apps, middleware, templates, auth, static files, logs.

Two running modes (controlplane/settings/env.py chooses):
- embedded (no DATABASE_URL / REDIS_URL): SQLite file, in-memory channel layer, Celery tasks
  run in-process, a secret key generated once in var/, plain http. For a newcomer's laptop
  (`make run`); tests do not rely on it.
- real services: PostgreSQL (psycopg 3), Redis channel layer and Celery broker; SECRET_KEY
  from the environment and HTTPS settings a deployment wants (docs/operations.md).
"""

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from controlplane.embedded import embedded_secret_key
from controlplane.settings.env import BASE_DIR, DATABASE_URL, DEBUG, VAR_DIR, env

# Lets admin classes be subscripted at runtime (ModelAdmin[Fleet]) as the stubs want.
django_stubs_ext.monkeypatch()


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
    "controlplane",  # its ready() makes var/ and the static root (controlplane/apps.py)
    "routing_policies",
    "telemetry",
    "lab",  # the policy lab; nothing imports it (docs/ARCHITECTURE.md)
    "autopilot",  # the θ autopilot, above the lab; nothing imports it
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
    "controlplane.middleware.ApiParameterCharactersMiddleware",
    "controlplane.middleware.ApiNotFoundMiddleware",
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
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Request bodies larger than this are refused with 413 before anything is parsed.
MAX_REQUEST_BYTES = env.int("MAX_REQUEST_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
DATA_UPLOAD_MAX_NUMBER_FIELDS = 5000

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
