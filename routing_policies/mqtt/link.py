"""`manage.py mqtt_link`'s loop: read devices' acks, presence and telemetry from the broker on
shared subscriptions (`$share/controlplane/...`: several processes split the messages) and land
them in batches (mqtt.consume); now and then, publish what a failed publish left out.

Messages arrive on paho's network thread and wait in a queue; the caller's thread takes them a
batch at a time (`drain`), lands them, then acknowledges each (manual PUBACK: a message is
acknowledged once its batch is written, never before).
"""

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import paho.mqtt.client as paho
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from edge_sdk import mqtt_topics

from .client import BrokerAddress, new_client
from .consume import Drops, Incoming, TelemetryIngest, messages_consume
from .publish import fleets_reconcile

logger = logging.getLogger(__name__)

BATCH_LIMIT = 1000
# After the first message of a batch, wait this long for company (a push's acks come together).
BATCH_WAIT_S = 0.05
# How long the broker keeps a named link's session (and queues its share) while it is away.
SESSION_EXPIRY_S = 24 * 3600
# A batch the database refuses is written again this many times before it is dropped.
WRITE_ATTEMPTS = 3


class MqttLink:
    """One subscriber process of the link."""

    def __init__(
        self,
        *,
        telemetry: TelemetryIngest | None,
        address: BrokerAddress | None = None,
        prefix: str | None = None,
        name: str = "",
    ) -> None:
        """`name`: a persistent session (client id `controlplane-link-{name}`), so that what
        the broker delivered to this link and was not acknowledged when it stopped, and what
        it kept for it meanwhile, is delivered when a link of that name connects again. Each
        running link needs a name of its own (the broker closes an older connection with the
        same id). Without a name, a clean session of its own."""
        self.telemetry = telemetry
        self.address = address or BrokerAddress.from_settings()
        self.prefix: str = prefix if prefix is not None else settings.MQTT_TOPIC_PREFIX
        self.drops = Drops()
        self.taken = 0  # messages taken from the broker (landed or dropped)
        self._inbox: queue.Queue[tuple[Incoming, int, int]] = queue.Queue()
        self._subscribed = threading.Event()
        self.name = name
        self._client = new_client(
            self.address,
            "link",
            manual_ack=True,
            fixed_id=f"controlplane-link-{name}" if name else "",
        )
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message

    # --- paho's network thread ---------------------------------------------------------------

    def filters(self) -> list[str]:
        """The shared subscriptions: every device's ack, presence and telemetry topics."""
        return [
            mqtt_topics.shared(mqtt_topics.device_topic(self.prefix, "+", "+", kind))
            for kind in mqtt_topics.DEVICE_TOPICS
        ]

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if isinstance(reason, ReasonCode) and reason.is_failure:
            logger.error("mqtt.link_refused reason=%s", reason)
            return
        # Again after every reconnect (idempotent when the session kept them).
        client.subscribe([(topic_filter, 1) for topic_filter in self.filters()])

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        failed = [code for code in codes if getattr(code, "is_failure", False)]
        if failed:
            logger.error("mqtt.link_subscribe_refused codes=%s", failed)
            return
        self._subscribed.set()

    def _on_message(self, client: Any, userdata: Any, message: paho.MQTTMessage) -> None:
        content_type = getattr(message.properties, "ContentType", "") if message.properties else ""
        incoming = Incoming(
            topic=message.topic,
            payload=bytes(message.payload),
            received_at=timezone.now(),
            content_type=content_type if isinstance(content_type, str) else "",
        )
        self._inbox.put((incoming, message.mid, message.qos))

    # --- the caller's thread -----------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> None:
        """Connect, subscribe, and wait until the broker confirmed the subscriptions."""
        self._client.reconnect_delay_set(min_delay=1, max_delay=30)
        properties = None
        if self.name:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = SESSION_EXPIRY_S
        self._client.connect(
            self.address.host,
            self.address.port,
            keepalive=30,
            clean_start=not self.name,
            properties=properties,
        )
        self._client.loop_start()
        if not self._subscribed.wait(timeout):
            self.stop()
            raise ConnectionError(f"the broker at {self.address.host} did not confirm subscribing")
        logger.info("mqtt.link_started filters=%s", self.filters())

    def stop(self) -> None:
        """Disconnect; messages not yet acknowledged are the broker's to deliver again."""
        self._client.disconnect()
        self._client.loop_stop()

    def _take(self, timeout: float) -> Iterator[tuple[Incoming, int, int]]:
        try:
            yield self._inbox.get(timeout=timeout)
        except queue.Empty:
            return
        deadline = time.monotonic() + BATCH_WAIT_S
        taken = 1
        while taken < BATCH_LIMIT:
            left = deadline - time.monotonic()
            try:
                yield self._inbox.get(timeout=left) if left > 0 else self._inbox.get_nowait()
            except queue.Empty:
                return
            taken += 1

    def drain(self, timeout: float = 1.0, *, renew: Callable[[], None] = lambda: None) -> int:
        """Land one batch (waiting up to `timeout` for its first message), then acknowledge its
        messages to the broker. The number of messages taken. `renew` runs before each write
        (the command: `close_old_connections`, as between two requests)."""
        entries = list(self._take(timeout))
        if not entries:
            return 0
        messages = [incoming for incoming, _, _ in entries]
        self.taken += len(entries)
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            renew()
            try:
                messages_consume(
                    messages, prefix=self.prefix, telemetry=self.telemetry, drops=self.drops
                )
                break
            except Exception:
                # The database went away: the same batch again (it is not acknowledged yet);
                # after the last attempt it is dropped, so that the broker keeps sending.
                logger.exception("mqtt.batch_failed messages=%d attempt=%d", len(entries), attempt)
                if attempt == WRITE_ATTEMPTS:
                    for message in messages:
                        self.drops.add("error", message.topic)
                else:
                    time.sleep(attempt)
        for _, mid, qos in entries:
            self._client.ack(mid, qos)
        return len(entries)

    def run_forever(self, reconcile_every_s: float | None = None) -> None:
        """Land batches until interrupted; publish what the broker lacks every
        `reconcile_every_s` (MQTT_RECONCILE_S)."""
        every: float = reconcile_every_s or settings.MQTT_RECONCILE_S
        self.start()
        next_reconcile = time.monotonic()
        try:
            while True:
                self.drain(timeout=1.0, renew=close_old_connections)
                if time.monotonic() >= next_reconcile:
                    close_old_connections()
                    try:
                        fleets_reconcile()
                    except Exception:
                        logger.exception("mqtt.reconcile_failed")
                    next_reconcile = time.monotonic() + every
                    if self.drops.counts:
                        logger.info("mqtt.dropped counts=%s", dict(self.drops.counts))
        finally:
            self.stop()
