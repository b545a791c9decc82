"""Kept only for `ENUM_NAME_OVERRIDES` in controlplane/settings.py, which names
"telemetry.events.FALLBACK_KINDS": the event schema is in telemetry/ingest/events.py.
Delete this file once that setting says "telemetry.ingest.events.FALLBACK_KINDS"."""

from .ingest.events import FALLBACK_KINDS

__all__ = ["FALLBACK_KINDS"]
