"""Edge SDK: the device side of device protocol v1.

The routing decision lives here once; the control plane imports it for its playground,
threshold calibration and backtests. An app embeds `Device` (see docs/sdk.md).
"""

from edge_sdk.backoff import Backoff
from edge_sdk.cache import ResultCache
from edge_sdk.config import SDK_VERSION, DeviceConfig
from edge_sdk.connection import STATES, DeviceRevoked, EnrolmentRefused
from edge_sdk.decision import (
    Cell,
    CellDocumentError,
    Decision,
    DeviceState,
    FallbackKind,
    Route,
    TaskSignals,
    decide,
    fallback_route,
)
from edge_sdk.device import Device
from edge_sdk.feedback import FeedbackQueue
from edge_sdk.listeners import Listener
from edge_sdk.policy import Policy, PolicyDocumentError, PolicyStore
from edge_sdk.router import NO_POLICY_DECISION, Router
from edge_sdk.task import (
    Answer,
    CloudInfer,
    DeviceInfer,
    Outcome,
    Readings,
    RefineInfer,
    RefineOutcome,
    RefineRequest,
    Task,
)
from edge_sdk.telemetry import TelemetryQueue, TelemetryRevoked, build_event

__all__ = [
    "NO_POLICY_DECISION",
    "SDK_VERSION",
    "STATES",
    "Answer",
    "Backoff",
    "Cell",
    "CellDocumentError",
    "CloudInfer",
    "Decision",
    "Device",
    "DeviceConfig",
    "DeviceInfer",
    "DeviceRevoked",
    "DeviceState",
    "EnrolmentRefused",
    "FallbackKind",
    "FeedbackQueue",
    "Listener",
    "Outcome",
    "Policy",
    "PolicyDocumentError",
    "PolicyStore",
    "Readings",
    "RefineInfer",
    "RefineOutcome",
    "RefineRequest",
    "ResultCache",
    "Route",
    "Router",
    "Task",
    "TaskSignals",
    "TelemetryQueue",
    "TelemetryRevoked",
    "build_event",
    "decide",
    "fallback_route",
]
