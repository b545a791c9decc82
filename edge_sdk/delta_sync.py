"""`PolicyDeltas`: a device's side of policy deltas (docs/PROTOCOL.md, "Policy deltas"), and its
reading of a weak link.

A delta arrives as a `policy_delta` frame (socket), a poll's `226 IM Used`, or the immutable
document's answer to `?since=N` (MQTT). It is applied to the document the device holds
(`edge_sdk.delta.apply_delta`, which checks the target's hash); what comes out goes on as the
whole document would (`PolicySync`, which checks it as any document). A delta that does not
apply (no base, another base, a hash that does not match, a malformed one) is counted and the
device asks for the whole document instead: its socket says `hello` again without `delta`, a
poll is repeated without `A-IM`, an MQTT device takes the version's whole document.

A weak link (`weak_link`): the app's readings say the link is metered, or slower or farther than
the device's thresholds (`DeviceConfig.weak_link_kbps`, `weak_link_rtt_ms`). Then the SDK
batches telemetry less often (`weak_link_telemetry_factor` × `telemetry_flush_s`) and takes
documents as deltas where it can: an MQTT device asks for the delta before the broker's whole
retained document, and prefetches no documents in the background.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from edge_sdk.config import DeviceConfig
from edge_sdk.delta import DeltaError, apply_delta
from edge_sdk.task import Readings

__all__ = ["DELTA_IM", "PolicyDeltas", "is_delta", "weak_link"]

logger = logging.getLogger(__name__)

DELTA_IM: Final = "policy-delta"  # RFC 3229 `A-IM` / `IM` (docs/PROTOCOL.md)
_FRAME_ONLY: Final = ("type", "rollout")
# Results of recent deltas, by (target hash, base version): the devices of one process (a
# simulator's thousands) that hold the same base and get the same push apply it once. A result
# is reused only for a held document equal to the base it was made from, so it is the document
# that hashes to the target's hash, whatever patch came.
_RECENT: OrderedDict[tuple[Any, Any], tuple[Mapping[str, Any], dict[str, Any]]] = OrderedDict()
_RECENT_SIZE: Final = 8


def weak_link(readings: Readings, config: DeviceConfig) -> bool:
    """The link is metered, slower than `weak_link_kbps` or farther than `weak_link_rtt_ms`."""
    return (
        readings.metered
        or readings.bandwidth_kbps < config.weak_link_kbps
        or readings.rtt_ms > config.weak_link_rtt_ms
    )


class PolicyDeltas:
    """Applies deltas to the held document and counts how they went."""

    __slots__ = ("_device_id", "applied", "enabled", "offered", "refused")

    def __init__(self, *, device_id: str, enabled: bool) -> None:
        self._device_id = device_id
        self.enabled = enabled  # DeviceConfig.policy_deltas
        self.offered = enabled  # this session's hello says `"delta": true`
        self.applied = 0  # deltas that gave a document
        self.refused = 0  # deltas that did not (the whole document was asked for)

    def session_opened(self) -> None:
        """A new session offers deltas again (a failed delta turned them off for the last)."""
        self.offered = self.enabled

    def document(self, held: Mapping[str, Any] | None, delta: Any) -> dict[str, Any] | None:
        """The document `delta` makes of the held one (hash checked), or None (counted)."""
        if held is None:
            self._refuse("no document held to apply it to")
            return None
        key = (delta.get("hash"), held.get("version")) if isinstance(delta, Mapping) else None
        recent = _RECENT.get(key) if key is not None else None
        if recent is not None and recent[0] == held and delta.get("base") == held.get("version"):
            self.applied += 1
            return recent[1]
        try:
            document = apply_delta(held, delta)
        except DeltaError as error:
            self._refuse(str(error))
            return None
        if key is not None:
            _RECENT[key] = (held, document)
            while len(_RECENT) > _RECENT_SIZE:
                _RECENT.popitem(last=False)
        self.applied += 1
        return document

    def from_frame(
        self, held: Mapping[str, Any] | None, frame: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The document a `policy_delta` frame makes of the held one; None: not applied, and
        deltas are off for the rest of the session (the caller says `hello` again)."""
        delta = {key: value for key, value in frame.items() if key not in _FRAME_ONLY}
        document = self.document(held, delta)
        if document is None:
            self.offered = False
        return document

    def _refuse(self, reason: str) -> None:
        self.refused += 1
        logger.warning("device.delta_refused device=%s reason=%s", self._device_id, reason)
        return None


def is_delta(body: Mapping[str, Any]) -> bool:
    """An HTTP answer that may be either (the immutable document's `?since`): the delta has
    `base` and `patch`, which a document never has."""
    return "patch" in body and "base" in body
