"""`PolicySync`: the policy documents the control plane sends a device, taken into its store.

A document arrives with a `policy` frame (socket) or a poll's 200 (with its ETag). It is
checked whole by `PolicyStore.apply` (edge_sdk.policy): an unusable one changes nothing and
is counted (`errors`). An applied one replaces the current version, drops the cached results
of the old one, and is written to `state_dir/policy.json` on a worker thread: thousands of
simulated devices get a push at once, and an fsync each would stall the event loop for
seconds. `saved()` waits for the newest write (`Device.stop` does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from edge_sdk.policy import PolicyDocumentError, PolicyStore

__all__ = ["PolicySync"]

logger = logging.getLogger(__name__)


class PolicySync:
    """Applies received documents to a device's `PolicyStore` and persists them off the loop."""

    __slots__ = ("_device_id", "_on_applied", "_persist", "_saving", "errors", "store")

    def __init__(
        self,
        store: PolicyStore,
        *,
        device_id: str,
        persist: bool,
        on_applied: Callable[[], None],
    ) -> None:
        self.store = store
        self._device_id = device_id
        self._persist = persist  # the device has a state_dir
        self._on_applied = on_applied  # e.g. the result cache's clear
        self._saving: asyncio.Future[None] | None = None
        self.errors = 0  # documents that could not be applied

    def load(self) -> None:
        """At start: the stored policy, unless one is applied already."""
        if self.store.current is None:
            self.store.load()

    def receive(
        self,
        document: Mapping[str, Any],
        rollout: Mapping[str, Any] | None,
        etag: str | None = None,
    ) -> bool:
        """Apply a document from the server; False (counted, logged) when it is unusable."""
        try:
            self.store.apply(document, rollout=rollout, etag=etag, save=False)
        except PolicyDocumentError as error:
            self.errors += 1
            logger.error("device.policy_unusable device=%s error=%s", self._device_id, error)
            return False
        self._on_applied()
        if self._persist:
            # The newest policy wins: PolicyStore.save writes the current one under a lock.
            self._saving = asyncio.get_running_loop().run_in_executor(None, self.store.save)
        return True

    async def saved(self) -> None:
        """Wait for the last write started (shielded: a cancelled stop still lets it finish)."""
        if self._saving is not None:
            await asyncio.shield(self._saving)
