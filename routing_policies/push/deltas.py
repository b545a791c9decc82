"""The `policy` or `policy_delta` frame a device socket gets (docs/PROTOCOL.md, "Policy deltas").

A socket whose `hello` said `"delta": true` holds a version (the one it named, then each it
acked): a push or a hello's answer sends it the delta from that version when the control plane
makes one (`policies.deltas`), else the whole document. Deltas are made from the documents the
push tier already holds as text (`documents`) and kept per process, one per (fleet, base,
target): a push builds each pair's frame once for all its sockets.
"""

import json
from collections import OrderedDict
from typing import Any, Final

from ..policies.deltas import delta_json, delta_kept
from . import frames
from .documents import documents

_NO_DELTA: Final = ""


class DeltaCache:
    """The delta of each (fleet, base, target) this process sent lately, as frame text."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._texts: OrderedDict[tuple[int, int, int], str] = OrderedDict()

    async def body(self, fleet_id: int, base: int, target: int) -> str | None:
        """The delta from `base` to `target` without its outer braces (to splice into a frame),
        or None when there is none to send (the whole document goes instead)."""
        if not delta_kept(base=base, target=target):
            return None
        key = (fleet_id, base, target)
        text = self._texts.get(key)
        if text is None:
            base_body = await documents.body(fleet_id, base)
            target_body = await documents.body(fleet_id, target)
            made = None
            if base_body is not None and target_body is not None:
                made = delta_json(
                    json.loads(f"{{{base_body}}}"),
                    json.loads(f"{{{target_body}}}"),
                    full_size=len(target_body.encode()) + 2,
                )
            text = made[1:-1] if made is not None else _NO_DELTA
            self._texts[key] = text
            while len(self._texts) > self.size:
                self._texts.popitem(last=False)
        self._texts.move_to_end(key)
        return text or None


deltas = DeltaCache()


async def policy_frame_text(
    fleet_id: int, version: int, base: int | None, rollout: dict[str, Any] | None
) -> str | None:
    """The frame that moves a device from `base` (None: it holds none, or takes no deltas) to
    `version`: a `policy_delta` when there is one, else the `policy`; None when the fleet has no
    such version."""
    if base is not None and base != version:
        body = await deltas.body(fleet_id, base, version)
        if body is not None:
            return frames.policy_delta_frame(body, rollout)
    body = await documents.body(fleet_id, version)
    return frames.policy_frame(body, rollout) if body is not None else None
