"""The app's models, one module per part; Django and other apps import them from here."""

from .devices.models import Device
from .mqtt.models import MqttFleetState
from .policies.models import AuditEntry, Fleet, PolicyCell, PolicyVersion
from .reviews.models import (
    ChangeRequest,
    ChangeRequestComment,
    ChangeRequestVerdict,
    FleetFreeze,
    ReviewSettings,
)
from .rollouts.models import FleetRouting, Rollout, RolloutEvent
from .schedules.models import ScheduledChange
from .segments.models import Segment

__all__ = [
    "AuditEntry",
    "ChangeRequest",
    "ChangeRequestComment",
    "ChangeRequestVerdict",
    "Device",
    "Fleet",
    "FleetFreeze",
    "FleetRouting",
    "MqttFleetState",
    "PolicyCell",
    "PolicyVersion",
    "ReviewSettings",
    "Rollout",
    "RolloutEvent",
    "ScheduledChange",
    "Segment",
]
