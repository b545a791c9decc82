"""Serializers of the change-governance API: the input each endpoint validates, and the answers
as the OpenAPI schema describes them."""

from collections.abc import Mapping
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from controlplane.api import JsonBooleanField, JsonChoiceField, JsonIntegerField, JsonStringField
from controlplane.exceptions import ValidationFailed
from controlplane.openapi import closed_body
from controlplane.validators import SOME_TEXT_PATTERN

from ..components import ApiSerializer
from ..rollouts.schemas import FreezeSerializer
from ..validation import MAX_VERSION
from .models import ChangeRequest

MAX_NOTE = 2000
MAX_REVISION = 2**31 - 1
InputSerializer = type[serializers.Serializer[Any]]


def note_field(*, required: bool = True, help_text: str) -> JsonStringField:
    """Free text of at most 2,000 characters (newlines allowed), with some text when required."""
    validators = (
        [RegexValidator(SOME_TEXT_PATTERN, "Must hold some text, not only whitespace.")]
        if required
        else []
    )
    return JsonStringField(
        max_length=MAX_NOTE,
        required=required,
        allow_blank=not required,
        default="" if not required else serializers.empty,
        validators=validators,
        help_text=help_text,
    )


@closed_body
class NoteInputSerializer(ApiSerializer):
    note = note_field(help_text="why: what you checked, what you acknowledge")

    class Meta:
        ref_name = "GovernanceNoteInput"


@closed_body
class ReviewSettingsSerializer(ApiSerializer):
    publish_needs_approval = JsonBooleanField(help_text="publishing needs another publisher's OK")
    rollout_needs_approval = JsonBooleanField(
        help_text="starting a rollout and switching the fleet need another publisher's OK"
    )

    class Meta:
        ref_name = "ReviewSettingsInput"


class ReviewSettingsOutSerializer(ReviewSettingsSerializer):
    fleet = serializers.SlugField()

    class Meta:
        ref_name = "ReviewSettings"


@closed_body
class PublishRequestOpenSerializer(ApiSerializer):
    kind = JsonChoiceField(choices=[ChangeRequest.Kind.PUBLISH.value])
    note = note_field(help_text="what the change is and why")

    class Meta:
        ref_name = "PublishRequestOpenInput"


@closed_body
class VersionRequestOpenSerializer(ApiSerializer):
    kind = JsonChoiceField(
        choices=[ChangeRequest.Kind.ROLLOUT_START.value, ChangeRequest.Kind.SWITCH.value]
    )
    version = JsonIntegerField(
        min_value=1, max_value=MAX_VERSION, help_text="the published version"
    )
    note = note_field(help_text="what the change is and why")

    class Meta:
        ref_name = "VersionRequestOpenInput"


OPEN_INPUTS: dict[str, InputSerializer] = {
    ChangeRequest.Kind.PUBLISH.value: PublishRequestOpenSerializer,
    ChangeRequest.Kind.ROLLOUT_START.value: VersionRequestOpenSerializer,
    ChangeRequest.Kind.SWITCH.value: VersionRequestOpenSerializer,
}
ChangeRequestOpenSerializer = PolymorphicProxySerializer(
    component_name="ChangeRequestOpenInput",
    serializers=dict(OPEN_INPUTS.items()),
    resource_type_field_name="kind",
)


def by_kind(inputs: dict[str, InputSerializer], data: Mapping[str, Any]) -> InputSerializer:
    """The input serializer of the body's `kind` (a refusal naming `kind` when unknown), for the
    API's body and a page's posted form alike."""
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in inputs:
        problem = f"one of {', '.join(inputs)} (got {str(kind)[:40]!r})"
        raise ValidationFailed(f"Kind: {problem}.", details=[{"field": "kind", "message": problem}])
    return inputs[kind]


def kind_fields(inputs: dict[str, InputSerializer]) -> dict[str, str]:
    """Each field that only some kinds' inputs take, with those kinds space-separated (what a
    page's form says in `data-kinds`, for static/js/kind_fields.js to show the chosen kind's)."""
    taking: dict[str, list[str]] = {}
    for kind, serializer in inputs.items():
        for name, _ in serializer().fields.items():
            taking.setdefault(name, []).append(kind)
    return {name: " ".join(kinds) for name, kinds in taking.items() if len(kinds) < len(inputs)}


@closed_body
class VerdictInputSerializer(ApiSerializer):
    # the revision the reviewer looked at (a stale one is refused with 409)
    revision = JsonIntegerField(
        min_value=1, max_value=MAX_REVISION, help_text="the revision reviewed"
    )
    note = note_field(required=False, help_text="what you checked (required to reject)")

    class Meta:
        ref_name = "ChangeRequestVerdictInput"


@closed_body
class RejectInputSerializer(VerdictInputSerializer):
    note = note_field(help_text="why not: what must change")

    class Meta:
        ref_name = "ChangeRequestRejectInput"


@closed_body
class CommentInputSerializer(ApiSerializer):
    body = note_field(help_text="the comment")

    class Meta:
        ref_name = "ChangeRequestCommentInput"


@closed_body
class PublishInputSerializer(VerdictInputSerializer):
    note = note_field(required=False, help_text="the release note (default: the request's note)")

    class Meta:
        ref_name = "ChangeRequestPublishInput"


class FleetFreezeSerializer(ApiSerializer):
    fleet = serializers.SlugField()
    frozen = serializers.BooleanField()
    freeze = FreezeSerializer(allow_null=True, help_text="the open freeze, else the last one")


class ChangeRequestSerializer(ApiSerializer):
    id = serializers.IntegerField()
    fleet = serializers.SlugField()
    kind = serializers.ChoiceField(choices=ChangeRequest.Kind.values)
    what = serializers.CharField()
    state = serializers.ChoiceField(choices=ChangeRequest.State.values)
    note = serializers.CharField()
    author = serializers.CharField()
    version = serializers.CharField(allow_null=True, help_text="draft or vN")
    version_number = serializers.IntegerField(allow_null=True)
    base = serializers.IntegerField(allow_null=True)
    revision = serializers.IntegerField(allow_null=True)
    status = serializers.ChoiceField(
        choices=["pending", "approved", "rejected", "done", "closed"],
        help_text="at the current revision while open",
    )
    approved_by = serializers.ListField(child=serializers.CharField())
    rejected_by = serializers.ListField(child=serializers.CharField())
    withdrawn_approvals = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    finished_by = serializers.CharField(allow_null=True)


class ChangeRequestListSerializer(ApiSerializer):
    results = ChangeRequestSerializer(many=True)


class ChangeRequestsForMeSerializer(ApiSerializer):
    to_review = ChangeRequestSerializer(many=True)
    mine = ChangeRequestSerializer(many=True)


class VerdictSerializer(ApiSerializer):
    reviewer = serializers.CharField()
    verdict = serializers.ChoiceField(choices=["approved", "rejected"])
    revision = serializers.IntegerField()
    note = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()
    current = serializers.BooleanField(help_text="of the current revision (else withdrawn)")

    class Meta:
        ref_name = "ChangeRequestVerdict"


class CommentSerializer(ApiSerializer):
    author = serializers.CharField()
    body = serializers.CharField()
    revision = serializers.IntegerField()
    at = serializers.DateTimeField()

    class Meta:
        ref_name = "ChangeRequestComment"


class ChangeRequestDetailSerializer(ChangeRequestSerializer):
    verdicts = VerdictSerializer(many=True)
    comments = CommentSerializer(many=True)
    diff = serializers.DictField(allow_null=True, help_text="base → draft, as /diff/ answers")


class ChangeRequestQuerySerializer(ApiSerializer):
    state = serializers.ChoiceField(choices=ChangeRequest.State.values, required=False)
