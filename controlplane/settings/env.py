"""The environment reader, the paths, and the variables that choose the running mode.

Every settings module reads the environment through `env` and imports what decides the mode
(embedded or real services) from here, so the modules never import each other for it.
"""

from pathlib import Path

import environ

env = environ.Env()

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
