"""Fleets, policy versions (drafts and immutable published versions), cells and the audit log."""

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..cell_schema import (
    FALLBACKS,
    FIELD_PATHS,
    FIELDS_BY_PATH,
    MAX_SHADOW_REFINE_RATE,
    MODES,
    CellKey,
)
from ..validation import MAX_DIMENSION_VALUE_LENGTH


class Fleet(models.Model):
    """A group of devices sharing one policy line (e.g. `voice-assistant-android`)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # What the fleet pays its cloud model (routing_policies.pricing.CloudPrice reads them):
    # currency units per 1,000 tokens sent to the cloud, and per cloud call.
    cloud_price_per_1k_tokens = models.FloatField(default=0.002)
    cloud_price_per_call = models.FloatField(default=0.0)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


# The longest release note a version takes (the API, the pages, publish itself).
MAX_NOTE_LENGTH = 2000


class PolicyVersion(models.Model):
    """One version of a fleet's policy table.

    A draft has no number and no `published_at`; it is editable and carries a `revision` that
    every edit increments (stale edits are refused). A published version has a number
    (1, 2, 3, ... per fleet), never changes, and carries the ETag of its document.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField(null=True, blank=True)
    dimensions = models.JSONField()
    revision = models.PositiveIntegerField(default=1)
    note = models.TextField(blank=True)
    based_on = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    published_at = models.DateTimeField(null=True, blank=True)
    etag = models.CharField(max_length=80, blank=True)
    # Overrides of cells by segment (docs/segments.md), in precedence order:
    # [{"segment": name, "rule": rule or None, "cells": {"voice/interactive/normal": {path: v}}}].
    # A published version holds each segment's rule as it was at publishing (its document
    # inlines them); a draft's rules are read from the fleet's segments when asked.
    overrides = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["fleet", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "number"],
                condition=Q(number__isnull=False),
                name="policy_version_number_unique_per_fleet",
            ),
            models.UniqueConstraint(
                fields=["fleet"],
                condition=Q(published_at__isnull=True),
                name="policy_version_one_draft_per_fleet",
            ),
            models.CheckConstraint(
                condition=(Q(number__isnull=True) & Q(published_at__isnull=True))
                | (Q(number__isnull=False) & Q(published_at__isnull=False)),
                name="policy_version_published_has_number",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id}:{'draft' if self.is_draft else f'v{self.number}'}"

    @property
    def is_draft(self) -> bool:
        """A draft is the one editable version of a fleet."""
        return self.published_at is None

    @property
    def label(self) -> str:
        """`v7` or `draft` as shown to people."""
        return "draft" if self.is_draft else f"v{self.number}"


class PolicyCell(models.Model):
    """One row of the table: task type × latency budget × privacy tier → how to route."""

    version = models.ForeignKey(PolicyVersion, on_delete=models.CASCADE, related_name="cells")
    task_type = models.CharField(max_length=MAX_DIMENSION_VALUE_LENGTH)
    latency_budget = models.CharField(max_length=MAX_DIMENSION_VALUE_LENGTH)
    privacy_tier = models.CharField(max_length=MAX_DIMENSION_VALUE_LENGTH)

    mode = models.CharField(max_length=16, choices=[(m, m) for m in MODES])
    threshold = models.FloatField()
    weight_length = models.FloatField()
    weight_intent = models.FloatField()
    weight_lm = models.FloatField()
    length_norm_tokens = models.PositiveIntegerField()
    latency_budget_ms = models.PositiveIntegerField()
    cloud_timeout_ms = models.PositiveIntegerField()
    fallback = models.CharField(max_length=16, choices=[(f, f) for f in FALLBACKS])
    upload_allowed = models.BooleanField()
    upload_deidentify = models.BooleanField()
    upload_max_bytes = models.PositiveIntegerField()
    rtt_high_ms = models.PositiveIntegerField()
    bandwidth_low_kbps = models.PositiveIntegerField()
    theta_raise = models.FloatField()
    load_busy = models.FloatField()
    theta_lower = models.FloatField()
    cache_ttl_s = models.PositiveIntegerField()
    # Share of device-answered tasks the cloud also refines in the background (0-0.05).
    shadow_refine_rate = models.FloatField(default=0.0)

    class Meta:
        ordering = ["version", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "task_type", "latency_budget", "privacy_tier"],
                name="policy_cell_unique_key_per_version",
            ),
            models.CheckConstraint(
                condition=Q(threshold__gte=0) & Q(threshold__lte=1),
                name="policy_cell_threshold_0_1",
            ),
            models.CheckConstraint(
                condition=Q(weight_length__gte=0) & Q(weight_intent__gte=0) & Q(weight_lm__gte=0),
                name="policy_cell_weights_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(length_norm_tokens__gt=0)
                & Q(latency_budget_ms__gt=0)
                & Q(cloud_timeout_ms__gt=0),
                name="policy_cell_positive_budgets",
            ),
            # A shadow refine sends the draft to the cloud: never where uploads are forbidden.
            models.CheckConstraint(
                condition=Q(shadow_refine_rate__gte=0)
                & Q(shadow_refine_rate__lte=MAX_SHADOW_REFINE_RATE)
                & (Q(upload_allowed=True) | Q(shadow_refine_rate=0)),
                name="policy_cell_shadow_refine_rate_allowed",
            ),
        ]

    def __str__(self) -> str:
        return "/".join(self.key)

    @property
    def key(self) -> CellKey:
        """(task_type, latency_budget, privacy_tier)."""
        return (self.task_type, self.latency_budget, self.privacy_tier)

    def values(self) -> dict[str, Any]:
        """The cell's fields keyed by document path (`weights.length`)."""
        return {path: getattr(self, FIELDS_BY_PATH[path].attr) for path in FIELD_PATHS}

    def apply_values(self, values: dict[str, Any]) -> None:
        """Set fields from document paths; values must already be validated."""
        for path, value in values.items():
            setattr(self, FIELDS_BY_PATH[path].attr, value)


class AuditEntry(models.Model):
    """Who did what to which object, when, with the state before and after and their diff."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64)
    fleet = models.ForeignKey(
        Fleet, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_entries"
    )
    target = models.CharField(max_length=200)
    summary = models.CharField(max_length=500, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    diff = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["fleet", "-created_at"], name="audit_fleet_time")]

    def __str__(self) -> str:
        return f"{self.action} {self.target}"
