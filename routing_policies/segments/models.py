"""Segments: named rules over device attributes, per fleet."""

from django.db import models

from ..policies.models import Fleet

# Bounds of a fleet's segments: how many, and a name's and a description's length.
MAX_SEGMENTS_PER_FLEET = 100
MAX_SEGMENT_NAME = 64
MAX_SEGMENT_DESCRIPTION = 200


class Segment(models.Model):
    """A named rule over device attributes (edge_sdk.segments); `revision` grows with each
    edit, so a stale edit is refused (409), never a silent overwrite."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="segments")
    name = models.CharField(max_length=MAX_SEGMENT_NAME)
    description = models.CharField(max_length=MAX_SEGMENT_DESCRIPTION, blank=True)
    rule = models.JSONField()
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["fleet", "name"]
        constraints = [
            models.UniqueConstraint(fields=["fleet", "name"], name="segment_unique_name_per_fleet")
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id}:{self.name}"
