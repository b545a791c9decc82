"""`Backoff`: the jittered exponential waits of reconnects, enrolment and telemetry retries."""

from __future__ import annotations

import random
from typing import Final

__all__ = ["JITTER", "Backoff"]

# Back-off jitter for devices given no rng of their own (a Random costs 2.5 KiB each).
JITTER: Final = random.Random()


class Backoff:
    """Jittered exponential back-off: the n-th wait is in [cap/2, cap], cap = base*2^n <= max."""

    __slots__ = ("attempt", "base_s", "max_s", "rng")

    def __init__(self, base_s: float, max_s: float, rng: random.Random) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.rng = rng
        self.attempt = 0

    def next_delay(self) -> float:
        """The next wait; each call doubles the cap until max_s."""
        cap = min(self.max_s, self.base_s * 2 ** min(self.attempt, 32))
        self.attempt += 1
        # Half fixed, half random: devices that lost the server together come back spread out.
        return float(cap / 2 + self.rng.uniform(0, cap / 2))

    def reset(self) -> None:
        """After a success: the next failure waits the shortest again."""
        self.attempt = 0
