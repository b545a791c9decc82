"""Feedback storage: one row per (event, sending device), and where it stands in the join.

A row is `held` until its event is found: then it is `joined` (its quality added to the rollup
rows of the event's minute, hour and fleet hour, once), `redundant` (the event carried its own
`quality`, which the rollups already count) or `unmatched` (the event belongs to another device
or fleet: the row never changes that fleet's figures). Feedback for an event that never
arrives stays held until retention removes it (TELEMETRY_RETENTION_DAYS, like raw events).
"""

from django.db import models
from django.db.models import Q

from ..model_fields import bulk_fleet_fk


class FeedbackState(models.TextChoices):
    """Where one feedback row stands in the join with its event."""

    HELD = "held"
    JOINED = "joined"
    REDUNDANT = "redundant"
    UNMATCHED = "unmatched"


class Feedback(models.Model):
    """The app's quality reading of one event, sent after the event (PROTOCOL.md extensions).

    Unique per event and sending device: a resend is a duplicate (the first value wins), and a
    device cannot keep another device's owner from giving its event a quality.
    """

    event_id = models.UUIDField()
    fleet = bulk_fleet_fk()
    device_pk = models.BigIntegerField()
    # The sender's `device_id`: the join needs it to equal the event's.
    device_id = models.CharField(max_length=128)
    quality = models.FloatField()
    received_at = models.DateTimeField()
    state = models.CharField(
        max_length=9, choices=FeedbackState.choices, default=FeedbackState.HELD
    )
    settled_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["event_id", "device_pk"], name="feedback_unique_event_device"
            )
        ]
        indexes = [
            models.Index(fields=["received_at"], name="feedback_received"),
            # The held rows are few (feedback waits for its event seconds, or never comes):
            # every fold of events probes this small index with its event ids.
            models.Index(fields=["event_id"], condition=Q(state="held"), name="feedback_held"),
        ]

    def __str__(self) -> str:
        return f"feedback {self.event_id} ({self.state})"
