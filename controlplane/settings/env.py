"""The environment reader, the paths, and the variables that choose the running mode.

Every settings module reads the environment through `env` and imports what decides the mode
(embedded or real services) from here, so the modules never import each other for it.
"""

from pathlib import Path
from typing import Any

import environ

env = environ.Env()

_READERS = {"bool": env.bool, "int": env.int, "float": env.float, "str": env.str}


def from_environment(settings: dict[str, Any]) -> None:
    """Let the environment override each setting a module declares with its type and default
    (`TELEMETRY_DRAINS: int = 2`): a variable of the setting's own name, read as that type."""
    for name, kind in settings.get("__annotations__", {}).items():
        reader = _READERS[kind if isinstance(kind, str) else kind.__name__]
        settings[name] = reader(name, default=settings[name])


BASE_DIR = Path(__file__).resolve().parent.parent.parent

# The embedded mode's files (SQLite database, secret key, static root, beat schedule), made
# when a process starts (controlplane/apps.py), never when settings are read.
VAR_DIR = BASE_DIR / env.str("VAR_DIR", default="var")

DEBUG = env.bool("DEBUG", default=False)
# Unset: SQLite in VAR_DIR. Set: PostgreSQL (psycopg 3), controlplane/settings/database.py.
DATABASE_URL = env.str("DATABASE_URL", default="")
# Unset: in-memory channel layer, Celery tasks run in-process. Set: Redis for both.
REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED = not REDIS_URL
