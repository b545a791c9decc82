"""The project package as an app, for the one thing every process does as it starts."""

from pathlib import Path

from django.apps import AppConfig
from django.conf import settings

from controlplane.embedded import make_var_dirs


class ControlPlaneConfig(AppConfig):
    """Startup of every process (server, commands, Celery, tests); settings have no side effects."""

    name = "controlplane"
    verbose_name = "Control plane"

    def ready(self) -> None:
        make_var_dirs(Path(settings.VAR_DIR), Path(settings.STATIC_ROOT))
