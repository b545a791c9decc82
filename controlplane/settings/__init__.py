"""Settings, read from the environment (django-environ), one module per concern.

`DJANGO_SETTINGS_MODULE=controlplane.settings` names this package; each module below reads
its own variables (docs/operations.md lists them) and env.py holds what chooses the mode.
"""

from controlplane.settings.alerts import *  # noqa: F403
from controlplane.settings.api import *  # noqa: F403
from controlplane.settings.base import *  # noqa: F403
from controlplane.settings.celery import *  # noqa: F403
from controlplane.settings.database import *  # noqa: F403
from controlplane.settings.env import *  # noqa: F403
from controlplane.settings.mqtt import *  # noqa: F403
from controlplane.settings.mqtt_access import *  # noqa: F403
from controlplane.settings.push import *  # noqa: F403
from controlplane.settings.telemetry import *  # noqa: F403
