"""Telemetry batches that arrive over MQTT (docs/PROTOCOL.md, "MQTT"): the same gate,
validation and landing as `POST /api/v1/telemetry` (`ingest_outcome`), exactly once per
`event_id`. There is no answer to send: a refused batch is dropped with its reason (the link
counts and logs it)."""

from __future__ import annotations

import logging

from controlplane.wire import BodyFormat, is_protobuf
from routing_policies.models import Device

from .fastpath import ingest_outcome

logger = logging.getLogger(__name__)

# The HTTP status a batch would have had, as the reason the link drops it.
_REFUSED = {400: "invalid", 413: "too_large", 415: "invalid", 429: "rate_limited"}


def telemetry_message_ingest(device: Device, body: bytes, content_type: str = "") -> str | None:
    """Land a device's MQTT telemetry batch; None once it is durable (or was all duplicates),
    else why it was refused. An MQTT 5 content type `application/x-protobuf` says the batch is
    protobuf (docs/PROTOCOL.md, "Binary frames and compression"); none, or another: JSON."""
    body_format = BodyFormat.of(content_type, "") if is_protobuf(content_type) else None
    status, data, _ = ingest_outcome(device, body, body_format, channel="mqtt")
    if status == 202:
        return None
    logger.info(
        "telemetry.mqtt_batch_refused device=%s status=%d error=%.300s", device.pk, status, data
    )
    return _REFUSED.get(status, "refused")
