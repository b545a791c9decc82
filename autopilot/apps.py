"""App config."""

from django.apps import AppConfig


class AutopilotConfig(AppConfig):
    """The θ autopilot (docs/lab.md, "The autopilot"): above the lab; nothing imports it."""

    name = "autopilot"
    label = "autopilot"
    default_auto_field = "django.db.models.BigAutoField"
