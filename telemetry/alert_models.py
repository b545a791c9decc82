"""Kept only for `ENUM_NAME_OVERRIDES` in controlplane/settings.py, which names
"telemetry.alert_models.Metric.values": the alert models are in telemetry/alerts/models.py.
Delete this file once that setting says "telemetry.alerts.models.Metric.values"."""

from .alerts.models import Metric

__all__ = ["Metric"]
