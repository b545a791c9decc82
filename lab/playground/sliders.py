"""The playground's sliders: each signal's range and step, and where the page starts.

The ranges are what a person explores, narrower than what the API accepts (the physical
ranges of a telemetry event); the page starts on the seed's second task on a good network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class Slider:
    """One range input of the page."""

    name: str
    label: str
    minimum: float
    maximum: float
    step: float
    unit: str = ""
    help: str = ""


TASK_SLIDERS: Final = (
    Slider("tokens", "Tokens", 0, 2000, 10, "tokens", "input length; capped at the cell's norm"),
    Slider("intent_conf", "Intent confidence", 0, 1, 0.01, "", "how sure intent recognition is"),
    Slider(
        "lm_conf", "On-device model confidence", 0, 1, 0.01, "", "the small model's own confidence"
    ),
    Slider("upload_bytes", "Upload", 0, 2_000_000, 10_000, "bytes", "data sent with a cloud call"),
)
DEVICE_SLIDERS: Final = (
    Slider("rtt_ms", "RTT", 0, 1000, 5, "ms", "network round trip"),
    Slider("bandwidth_kbps", "Bandwidth", 0, 50_000, 100, "kbps", "uplink bandwidth"),
    Slider("device_load", "Device load", 0, 1, 0.01, "", "busy at the cell's load limit"),
    Slider(
        "cloud_pressure",
        "Cloud pressure",
        -0.5,
        0.5,
        0.01,
        "θ",
        "live θ offset pushed to the fleet",
    ),
    Slider(
        "cloud_infer_ms", "Cloud inference", 0, 3000, 10, "ms", "T_infer, the cloud model's time"
    ),
)
START_CELL: Final = ("text", "interactive", "normal")
START_TASK: Final[dict[str, Any]] = {
    "tokens": 180,
    "intent_conf": 0.85,
    "lm_conf": 0.72,
    "upload_bytes": 0,
}
START_DEVICE: Final[dict[str, Any]] = {
    "rtt_ms": 80.0,
    "bandwidth_kbps": 5000.0,
    "device_load": 0.3,
    "online": True,
    "cloud_pressure": 0.0,
    "cloud_infer_ms": 250.0,
}
