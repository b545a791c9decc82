"""Enrolled devices: their tokens (hashed), presence and what they run."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import connection, models
from django.db.models import Q
from django.utils import timezone

from ..assignment import BUCKET_SQL, FleetAssignment, bucket
from ..policies.models import Fleet
from ..segments.rules import device_attributes, rule_matches

ONLINE_WINDOW = timedelta(minutes=2)


# How a device is linked now: the WebSocket path (PROTOCOL.md) or the MQTT extension.
TRANSPORT_WS = "ws"
TRANSPORT_MQTT = "mqtt"


def online_q(now: datetime | None = None) -> Q:
    """Online devices: over WebSocket, a live socket that said `hello` with the device's current
    token; over MQTT, a birth message with no last will since.

    `connected` is set by that socket's `hello` (and its heartbeat), cleared when it closes,
    when a new socket of the device connects (until that one says hello), when the device
    re-enrols (its old token's socket is being closed) and when it is revoked. A killed server
    leaves stale flags: those count only while seen within ONLINE_WINDOW. An MQTT device has no
    heartbeat in the database: the broker tells of its end (its last will, sent whenever its
    connection ends without a goodbye), so its flag counts as long as no will came.
    """
    now = now or timezone.now()
    return Q(connected=True, revoked_at__isnull=True) & (
        Q(transport=TRANSPORT_MQTT) | Q(last_seen_at__gte=now - ONLINE_WINDOW)
    )


def device_online(device: "Device", now: datetime) -> bool:
    """`online_q` for one loaded device."""
    if not device.connected or device.revoked_at is not None:
        return False
    if device.transport == TRANSPORT_MQTT:
        return True
    return device.last_seen_at is not None and device.last_seen_at >= now - ONLINE_WINDOW


class DeviceQuerySet(models.QuerySet["Device"]):
    """The filters every reader of devices shares: live, online, in a rollout's cohort."""

    def live(self) -> "DeviceQuerySet":
        """Enrolled devices whose token is not revoked."""
        return self.filter(revoked_at__isnull=True)

    def online(self, now: datetime | None = None) -> "DeviceQuerySet":
        """See `online_q`."""
        return self.filter(online_q(now))

    def in_scope(self, rule: Mapping[str, Any] | None) -> "DeviceQuerySet":
        """Devices a segment's rule matches (all of them for None). The rule is evaluated once
        per distinct set of attributes (one GROUP BY, as the segments' census), with the one
        evaluation (`rule_matches`), and the matching sets become the filter."""
        if rule is None:
            return self
        matching = Q(pk__in=[])
        groups = self.values("platform", "model", "attributes").distinct().order_by()
        for group in groups:
            attributes = device_attributes(
                platform=group["platform"], model=group["model"], reported=group["attributes"]
            )
            if rule_matches(rule, attributes):
                matching |= Q(
                    platform=group["platform"],
                    model=group["model"],
                    attributes=group["attributes"],
                )
        return self.filter(matching)

    def in_candidate_cohort(self, assignment: FleetAssignment) -> "DeviceQuerySet":
        """Devices whose bucket (and scope) gives them the candidate of a split assignment
        (`assignment.splits`): in SQL on PostgreSQL, else bucket by bucket in Python."""
        scoped = self.in_scope(assignment.scope)
        if assignment.candidate_share >= 100:
            return scoped
        if connection.vendor == "postgresql":
            cohort = scoped.extra(  # noqa: S610  # the salt is a parameter, not interpolated
                where=[f"{BUCKET_SQL} < %s"],
                params=[assignment.salt, assignment.candidate_buckets],
            )
            return cast("DeviceQuerySet", cohort)
        return scoped.filter(
            pk__in=[
                pk
                for pk, device_id in scoped.values_list("pk", "device_id")
                if assignment.version_at(bucket(assignment.salt, device_id)) == assignment.candidate
            ]
        )


class Device(models.Model):
    """An enrolled device; its token is stored hashed and shown only once, at enrolment."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="devices")
    device_id = models.CharField(max_length=128)
    token_hash = models.CharField(max_length=64, unique=True)
    platform = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=128, blank=True)
    sdk = models.CharField(max_length=64, blank=True)
    enrolled_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    connected = models.BooleanField(default=False)
    reported_version = models.PositiveIntegerField(null=True, blank=True)
    acked_version = models.PositiveIntegerField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The link of its last hello (WebSocket) or birth (MQTT): what `online_q` reads.
    transport = models.CharField(
        max_length=8,
        choices=[(TRANSPORT_WS, "WebSocket"), (TRANSPORT_MQTT, "MQTT")],
        default=TRANSPORT_WS,
    )
    # What it reported beyond platform and model (edge_sdk.segments.REPORTED_ATTRIBUTES), as
    # checked at enrolment or its last hello / birth; a name missing is unknown.
    attributes = models.JSONField(default=dict, blank=True)

    objects = DeviceQuerySet.as_manager()

    class Meta:
        ordering = ["fleet", "device_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "device_id"], name="device_unique_id_per_fleet"
            ),
        ]
        indexes = [models.Index(fields=["fleet", "acked_version"], name="device_fleet_acked")]

    def __str__(self) -> str:
        return f"{self.fleet_id}:{self.device_id}"
