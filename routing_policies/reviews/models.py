"""A fleet's review settings, its change requests with their comments and verdicts, and the
freeze an automatic rollback puts on its rollouts."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..policies.models import Fleet, PolicyVersion
from ..rollouts.models import Rollout


class FleetFreeze(models.Model):
    """The fleet's rollouts, starts and switches held after a guard rolled one back, until a
    publisher acknowledges the reason with a note (`released_at` set)."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="freezes")
    rollout = models.ForeignKey(
        Rollout, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=500)
    frozen_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    released_by_name = models.CharField(max_length=150, blank=True)
    release_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-frozen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet"],
                condition=Q(released_at__isnull=True),
                name="fleet_freeze_one_open_per_fleet",
            )
        ]

    def __str__(self) -> str:
        return f"freeze {self.pk} of {self.fleet_id}"


class ReviewSettings(models.Model):
    """What of a fleet needs another publisher's approval first (no row: nothing does)."""

    fleet = models.OneToOneField(Fleet, on_delete=models.CASCADE, related_name="review_settings")
    publish_needs_approval = models.BooleanField(default=False)
    rollout_needs_approval = models.BooleanField(
        default=False, help_text="starting a rollout and switching the whole fleet"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"review settings of {self.fleet_id}"


class ChangeRequest(models.Model):
    """A change put up for review: publishing the draft, or starting a rollout of / switching
    to a published version. Approved when a publisher other than the author approved the
    version's current revision (an edit of the draft after it withdraws the approval)."""

    class Kind(models.TextChoices):
        PUBLISH = "publish"
        ROLLOUT_START = "rollout_start"
        SWITCH = "switch"

    class State(models.TextChoices):
        OPEN = "open"
        DONE = "done"  # published, started or switched
        CLOSED = "closed"  # withdrawn, or its draft discarded

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="change_requests")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The draft to publish (it becomes the published version, same row), or the published
    # version to roll out / switch to.
    version = models.ForeignKey(
        PolicyVersion, null=True, on_delete=models.SET_NULL, related_name="change_requests"
    )
    # The draft's base as the request was opened (the diff's left side); the number it was
    # published as, or the version rolled out, once done.
    base_number = models.PositiveIntegerField(null=True, blank=True)
    version_number = models.PositiveIntegerField(null=True, blank=True)
    note = models.TextField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.OPEN)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    finished_by_name = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "kind"],
                condition=Q(state="open"),
                name="change_request_one_open_per_kind",
            )
        ]
        indexes = [models.Index(fields=["state", "-created_at"], name="change_request_state")]

    def __str__(self) -> str:
        return f"change request {self.pk} ({self.kind}, {self.state})"


class ChangeRequestComment(models.Model):
    """One message of a change request's thread (verdicts carry their own notes)."""

    change_request = models.ForeignKey(
        ChangeRequest, on_delete=models.CASCADE, related_name="comments"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=150)
    body = models.TextField()
    revision = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["change_request", "created_at", "id"]

    def __str__(self) -> str:
        return f"comment {self.pk} on {self.change_request_id}"


class ChangeRequestVerdict(models.Model):
    """A reviewer's approval or rejection of one revision of a change request's version."""

    class Verdict(models.TextChoices):
        APPROVED = "approved"
        REJECTED = "rejected"

    change_request = models.ForeignKey(
        ChangeRequest, on_delete=models.CASCADE, related_name="verdicts"
    )
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewer_name = models.CharField(max_length=150)
    verdict = models.CharField(max_length=8, choices=Verdict.choices)
    revision = models.PositiveIntegerField()
    note = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["change_request", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["change_request", "reviewer", "revision"],
                name="change_request_one_verdict_per_reviewer_revision",
            )
        ]

    def __str__(self) -> str:
        return f"{self.verdict} r{self.revision} of {self.change_request_id}"
