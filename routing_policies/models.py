"""The app's models, one module per part; Django and other apps import them from here."""

from .devices.models import Device
from .policies.models import AuditEntry, Fleet, PolicyCell, PolicyVersion
from .rollouts.models import FleetRouting, Rollout, RolloutEvent

__all__ = [
    "AuditEntry",
    "Device",
    "Fleet",
    "FleetRouting",
    "PolicyCell",
    "PolicyVersion",
    "Rollout",
    "RolloutEvent",
]
