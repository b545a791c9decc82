"""What a simulated device is made of: hardware, network link, load, and the cloud it calls.

Pure models, no I/O: each takes the simulation clock (`now`, seconds) and a `random.Random`,
so a seeded run is reproducible and every model is unit-tested on its own. Latencies follow
the seed article: on the device tens of milliseconds; to the cloud
`upload_bytes * 8 / bandwidth + RTT + T_infer`, with `T_infer` from one queue that the whole
fleet shares and that slows down as the fleet sends it more work.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

__all__ = [
    "CLOUD_ESTIMATE_TASK",
    "DEVICE_PROFILES",
    "LINK_PROFILES",
    "CloudOverloaded",
    "CloudQueue",
    "DeviceFailure",
    "DeviceProfile",
    "Link",
    "LinkProfile",
    "LinkReading",
    "Load",
    "NetworkConditions",
    "cloud_estimate_ms",
    "device_infer_ms",
    "modality",
    "model_table",
    "pick_weighted",
    "upload_ms",
]

MODALITIES: Final = ("voice", "text", "image")
T = TypeVar("T")


class DeviceFailure(RuntimeError):
    """The on-device model failed (out of memory, NPU busy, a crash): the SDK may fall back."""


class CloudOverloaded(RuntimeError):
    """The cloud answered with an error (503 under overload, a bad gateway)."""


def modality(task_type: str) -> str:
    """The seed's three task types keep their own figures; any other type (an operator's
    `code`, `summary`, …) is treated as text."""
    return task_type if task_type in MODALITIES else "text"


def pick_weighted(rng: random.Random, options: tuple[tuple[T, float], ...]) -> T:
    """One option, drawn with its weight."""
    total = sum(weight for _, weight in options)
    point = rng.random() * total
    for option, weight in options:
        point -= weight
        if point < 0:
            return option
    return options[-1][0]


def model_table(
    model: Callable[..., T], columns: tuple[str, ...], *rows: tuple[Any, ...]
) -> tuple[T, ...]:
    """A table of figures as the models it describes: one `model(**row)` a row, its values
    named by `columns` in order."""
    return tuple(model(**dict(zip(columns, row, strict=True))) for row in rows)


# --- the device ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceProfile:
    """A kind of device in the fleet: what it reports at enrolment and how fast its NPU is."""

    platform: str
    model: str
    speed: float  # multiplies on-device inference time: 1.0 a current flagship phone
    failure_rate: float  # share of on-device inferences that fail
    weight: float  # share of the fleet


DEVICE_PROFILES: Final = model_table(
    DeviceProfile,
    ("platform", "model", "speed", "failure_rate", "weight"),
    ("android", "Pixel 8", 1.0, 0.002, 0.22),
    ("android", "Galaxy S23", 0.9, 0.002, 0.20),
    ("android", "Redmi Note 12", 1.8, 0.006, 0.28),
    ("android", "Galaxy A15", 2.4, 0.01, 0.15),
    ("android-automotive", "Head unit SA8155", 1.4, 0.004, 0.08),
    ("android-things", "Smart speaker", 2.0, 0.004, 0.07),
)

# What each kind of device reports about itself beyond platform and model (docs/PROTOCOL.md,
# Device attributes): its hardware and the on-device model its app ships for it.
PROFILE_ATTRIBUTES: Final[dict[str, dict[str, Any]]] = {
    "Pixel 8": {
        "accelerator": "npu",
        "memory_gb": 8,
        "os_version": "14",
        "local_model": "qwen2.5-3b",
        "quantisation": "int4",
    },
    "Galaxy S23": {
        "accelerator": "npu",
        "memory_gb": 8,
        "os_version": "14",
        "local_model": "qwen2.5-3b",
        "quantisation": "int4",
    },
    "Redmi Note 12": {
        "accelerator": "gpu",
        "memory_gb": 6,
        "os_version": "13",
        "local_model": "qwen2.5-1.5b",
        "quantisation": "int4",
    },
    "Galaxy A15": {
        "accelerator": "cpu",
        "memory_gb": 4,
        "os_version": "14",
        "local_model": "qwen2.5-0.5b",
        "quantisation": "int8",
    },
    "Head unit SA8155": {
        "accelerator": "npu",
        "memory_gb": 12,
        "os_version": "12",
        "local_model": "llama3.2-1b",
        "quantisation": "int8",
    },
    "Smart speaker": {
        "accelerator": "cpu",
        "memory_gb": 2,
        "os_version": "10",
        "local_model": "qwen2.5-0.5b",
        "quantisation": "int4",
    },
}
APP_VERSIONS: Final = (("4.10.2", 0.1), ("4.11.0", 0.25), ("4.12.0", 0.4), ("4.12.1", 0.25))
REGIONS: Final = (("eu-west", 0.35), ("us-east", 0.3), ("ap-south", 0.25), ("sa-east", 0.1))
# Devices still on an app older than attribute reporting: they report none (all unknown).
SILENT_SHARE: Final = 0.08


def profile_attributes(profile: DeviceProfile, device_id: str) -> dict[str, Any]:
    """What a simulated device reports: its profile's hardware and model, an app version and
    a region drawn per device (from its id, so the fleet's seeded draws stay as they were),
    or nothing at all for a device on an old app."""
    rng = random.Random(f"attributes:{device_id}")
    if rng.random() < SILENT_SHARE:
        return {}
    return {
        **PROFILE_ATTRIBUTES.get(profile.model, {}),
        "app_version": pick_weighted(rng, APP_VERSIONS),
        "region": pick_weighted(rng, REGIONS),
    }


# On-device inference (a 1-3B quantised model on the NPU): fixed cost + cost per input token.
_DEVICE_BASE_MS: Final = {"voice": 18.0, "text": 20.0, "image": 55.0}
_DEVICE_PER_TOKEN_MS: Final = {"voice": 0.08, "text": 0.05, "image": 0.1}


def device_infer_ms(
    profile: DeviceProfile, task_type: str, tokens: int, load: float, rng: random.Random
) -> float:
    """On-device latency: tens of ms, slower on older hardware and under load."""
    kind = modality(task_type)
    nominal = _DEVICE_BASE_MS[kind] + _DEVICE_PER_TOKEN_MS[kind] * tokens
    return nominal * profile.speed * (1.0 + 0.8 * load) * rng.lognormvariate(0.0, 0.2)


# --- the network ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkProfile:
    """A kind of network link: the ranges a device's typical RTT and bandwidth are drawn
    from, and how often and how long it drops off the network."""

    name: str
    rtt_ms: tuple[float, float]
    bandwidth_kbps: tuple[float, float]
    offline_per_hour: float
    offline_mean_s: float
    weight: float


LINK_PROFILES: Final = model_table(
    LinkProfile,
    ("name", "rtt_ms", "bandwidth_kbps", "offline_per_hour", "offline_mean_s", "weight"),
    ("wifi", (10.0, 45.0), (10_000.0, 100_000.0), 0.3, 8.0, 0.45),
    # The seed: "mobile networks usually have an RTT of 50 to 200 ms".
    ("mobile", (50.0, 200.0), (1_500.0, 20_000.0), 1.5, 20.0, 0.45),
    ("weak", (180.0, 450.0), (150.0, 900.0), 6.0, 45.0, 0.10),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkConditions:
    """Fleet-wide network weather (a scenario's lever): factors on every link."""

    rtt_factor: float = 1.0
    bandwidth_factor: float = 1.0
    offline_factor: float = 1.0  # multiplies how often links drop


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkReading:
    """What the device measures about its link right now."""

    rtt_ms: float
    bandwidth_kbps: float
    online: bool


class Link:
    """One device's link: a typical RTT and bandwidth with jitter, and offline spells as a
    Poisson process (exponential gaps and exponential durations)."""

    __slots__ = ("_next_spell", "_offline_until", "_rng", "bandwidth_kbps", "profile", "rtt_ms")

    def __init__(self, profile: LinkProfile, rng: random.Random, now: float = 0.0) -> None:
        self.profile = profile
        self._rng = rng
        self.rtt_ms = rng.uniform(*profile.rtt_ms)
        low, high = profile.bandwidth_kbps
        self.bandwidth_kbps = math.exp(rng.uniform(math.log(low), math.log(high)))
        self._offline_until = -math.inf
        self._next_spell = now + self._gap(NetworkConditions())

    def _gap(self, conditions: NetworkConditions) -> float:
        rate_per_s = self.profile.offline_per_hour * conditions.offline_factor / 3600.0
        return self._rng.expovariate(rate_per_s) if rate_per_s > 0 else math.inf

    def online(self, now: float, conditions: NetworkConditions) -> bool:
        """Advance the offline-spell process to `now`; True when the link is up."""
        while now >= self._next_spell:
            self._offline_until = self._next_spell + self._rng.expovariate(
                1.0 / self.profile.offline_mean_s
            )
            self._next_spell = self._offline_until + self._gap(conditions)
        return now >= self._offline_until

    def reading(self, now: float, conditions: NetworkConditions) -> LinkReading:
        """The link right now: typical figures times the fleet's conditions, with jitter."""
        jitter = self._rng.lognormvariate(0.0, 0.15)
        return LinkReading(
            rtt_ms=self.rtt_ms * conditions.rtt_factor * jitter,
            bandwidth_kbps=self.bandwidth_kbps * conditions.bandwidth_factor / jitter,
            online=self.online(now, conditions),
        )


# --- the device's load ---------------------------------------------------------------------


class Load:
    """Device load in [0, 1]: a mean-reverting walk around the device's usual level, with
    bursts (a game, navigation, a video call) that push it past the cells' `busy` mark."""

    __slots__ = ("_burst_until", "_last", "_next_burst", "_rng", "level", "usual")

    REVERSION_PER_S: Final = 0.05
    NOISE_PER_SQRT_S: Final = 0.04
    BURSTS_PER_HOUR: Final = 4.0
    BURST_MEAN_S: Final = 60.0

    def __init__(self, rng: random.Random, now: float = 0.0) -> None:
        self._rng = rng
        self.usual = rng.uniform(0.1, 0.5)
        self.level = self.usual
        self._last = now
        self._burst_until = -math.inf
        self._next_burst = now + rng.expovariate(self.BURSTS_PER_HOUR / 3600.0)

    def reading(self, now: float) -> float:
        """The load at `now` (time only moves forward; an earlier `now` reads the last level)."""
        elapsed = max(0.0, now - self._last)
        self._last = max(self._last, now)
        if elapsed:
            pull = 1.0 - math.exp(-self.REVERSION_PER_S * elapsed)
            noise = self._rng.gauss(0.0, self.NOISE_PER_SQRT_S * math.sqrt(elapsed))
            self.level += (self.usual - self.level) * pull + noise
            self.level = min(1.0, max(0.0, self.level))
        while now >= self._next_burst:
            self._burst_until = self._next_burst + self._rng.expovariate(1.0 / self.BURST_MEAN_S)
            self._next_burst = self._burst_until + self._rng.expovariate(
                self.BURSTS_PER_HOUR / 3600.0
            )
        if now < self._burst_until:
            return max(self.level, 0.85)
        return self.level


# --- the cloud ---------------------------------------------------------------------------------

# The large model's inference time when idle: fixed cost + cost per input token.
_CLOUD_BASE_MS: Final = {"voice": 90.0, "text": 110.0, "image": 240.0}
_CLOUD_PER_TOKEN_MS: Final = {"voice": 0.2, "text": 0.25, "image": 0.3}
# The task devices use for their estimate of cloud inference time (a typical text request).
CLOUD_ESTIMATE_TASK: Final = ("text", 150)
_MAX_SLOWDOWN: Final = 20.0


class CloudQueue:
    """The cloud cluster the whole fleet shares, as a single queue.

    Arrivals are counted with an exponentially decaying rate (time constant `window_s`);
    utilisation is that rate over the capacity, and inference time grows like a queue's
    response time, `1 / (1 - utilisation)`, capped at 20x. Past full utilisation it also
    starts refusing work (503s). So more tasks sent to the cloud (a lower θ, a buggy model)
    make every cloud call slower, and a `cloud_pressure` nudge that keeps work on devices
    makes them faster again.
    """

    __slots__ = ("_last", "_rate", "base_failure_rate", "capacity_rps", "window_s")

    def __init__(
        self, *, capacity_rps: float, window_s: float = 5.0, base_failure_rate: float = 0.003
    ) -> None:
        if capacity_rps <= 0:
            raise ValueError("capacity_rps must be positive")
        self.capacity_rps = capacity_rps
        self.window_s = window_s
        self.base_failure_rate = base_failure_rate
        self._rate = 0.0
        self._last = 0.0

    def _decayed(self, now: float) -> float:
        if now <= self._last:
            return self._rate
        return self._rate * math.exp(-(now - self._last) / self.window_s)

    def arrival(self, now: float) -> None:
        """Count one request arriving at `now`."""
        self._rate = self._decayed(now) + 1.0 / self.window_s
        self._last = max(self._last, now)

    def rate(self, now: float) -> float:
        """Requests per second arriving lately."""
        return self._decayed(now)

    def utilisation(self, now: float, capacity_factor: float = 1.0) -> float:
        """Arrival rate over capacity (may exceed 1 under overload)."""
        return self.rate(now) / (self.capacity_rps * capacity_factor)

    def slowdown(self, now: float, capacity_factor: float = 1.0) -> float:
        """How many times slower than idle an inference is right now (1 to 20)."""
        busy = self.utilisation(now, capacity_factor)
        return min(_MAX_SLOWDOWN, 1.0 / max(1.0 / _MAX_SLOWDOWN, 1.0 - busy))

    def failure_rate(self, now: float, capacity_factor: float = 1.0) -> float:
        """Share of requests refused: a small base, and more and more past saturation."""
        excess = max(0.0, self.utilisation(now, capacity_factor) - 1.0)
        return min(0.5, self.base_failure_rate + 0.25 * excess)

    def infer_ms(
        self,
        task_type: str,
        tokens: int,
        now: float,
        rng: random.Random,
        capacity_factor: float = 1.0,
    ) -> float:
        """Cloud inference time of one task arriving now (T_infer of the seed)."""
        kind = modality(task_type)
        idle = _CLOUD_BASE_MS[kind] + _CLOUD_PER_TOKEN_MS[kind] * tokens
        return idle * self.slowdown(now, capacity_factor) * rng.lognormvariate(0.0, 0.25)

    def estimate_ms(self, now: float, capacity_factor: float = 1.0) -> float:
        """What a device expects cloud inference to take (for step 7 of the decision)."""
        return cloud_estimate_ms(self.slowdown(now, capacity_factor))


def cloud_estimate_ms(slowdown: float) -> float:
    """A device's estimate of cloud inference time: a typical task at the queue's slowdown."""
    kind, tokens = CLOUD_ESTIMATE_TASK
    return (_CLOUD_BASE_MS[kind] + _CLOUD_PER_TOKEN_MS[kind] * tokens) * slowdown


def upload_ms(upload_bytes: int, bandwidth_kbps: float) -> float:
    """Time to send `upload_bytes` at `bandwidth_kbps` (bytes * 8 / kbit/s = ms)."""
    if bandwidth_kbps <= 0:
        return math.inf
    return upload_bytes * 8 / bandwidth_kbps
