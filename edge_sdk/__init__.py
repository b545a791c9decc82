"""Edge SDK: the device side of device protocol v1.

The routing decision lives here once; the control plane imports it for its playground,
threshold calibration and backtests.
"""

from edge_sdk.decision import (
    Cell,
    CellDocumentError,
    Decision,
    DeviceState,
    TaskSignals,
    decide,
    fallback_route,
)

__all__ = [
    "Cell",
    "CellDocumentError",
    "Decision",
    "DeviceState",
    "TaskSignals",
    "decide",
    "fallback_route",
]
