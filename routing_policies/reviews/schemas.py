"""Serializers of the change-governance API: the input each endpoint validates, and the answers
as the OpenAPI schema describes them."""

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from controlplane.api import JsonBooleanField, JsonChoiceField, JsonIntegerField, JsonStringField
from controlplane.openapi import ApiSerializer, closed_body
from controlplane.validators import SOME_TEXT_PATTERN

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
    component_name = "GovernanceNoteInput"

    note = note_field(help_text="why: what you checked, what you acknowledge")


@closed_body
class ReviewSettingsSerializer(ApiSerializer):
    component_name = "ReviewSettingsInput"

    publish_needs_approval = JsonBooleanField(help_text="publishing needs another publisher's OK")
    rollout_needs_approval = JsonBooleanField(
        help_text="starting a rollout and switching the fleet need another publisher's OK"
    )


class ReviewSettingsOutSerializer(ReviewSettingsSerializer):
    component_name = "ReviewSettings"

    fleet = serializers.SlugField()


@closed_body
class PublishRequestOpenSerializer(ApiSerializer):
    component_name = "PublishRequestOpenInput"

    kind = JsonChoiceField(choices=[ChangeRequest.Kind.PUBLISH.value])
    note = note_field(help_text="what the change is and why")


@closed_body
class VersionRequestOpenSerializer(ApiSerializer):
    component_name = "VersionRequestOpenInput"

    kind = JsonChoiceField(
        choices=[ChangeRequest.Kind.ROLLOUT_START.value, ChangeRequest.Kind.SWITCH.value]
    )
    version = JsonIntegerField(
        min_value=1, max_value=MAX_VERSION, help_text="the published version"
    )
    note = note_field(help_text="what the change is and why")


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
    component_name = "ChangeRequestVerdictInput"

    # the revision the reviewer looked at (a stale one is refused with 409)
    revision = JsonIntegerField(
        min_value=1, max_value=MAX_REVISION, help_text="the revision reviewed"
    )
    note = note_field(required=False, help_text="what you checked (required to reject)")


@closed_body
class RejectInputSerializer(VerdictInputSerializer):
    component_name = "ChangeRequestRejectInput"

    note = note_field(help_text="why not: what must change")


@closed_body
class CommentInputSerializer(ApiSerializer):
    component_name = "ChangeRequestCommentInput"

    body = note_field(help_text="the comment")


@closed_body
class PublishInputSerializer(VerdictInputSerializer):
    component_name = "ChangeRequestPublishInput"

    note = note_field(required=False, help_text="the release note (default: the request's note)")


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
    component_name = "ChangeRequestVerdict"

    reviewer = serializers.CharField()
    verdict = serializers.ChoiceField(choices=["approved", "rejected"])
    revision = serializers.IntegerField()
    note = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()
    current = serializers.BooleanField(help_text="of the current revision (else withdrawn)")


class CommentSerializer(ApiSerializer):
    component_name = "ChangeRequestComment"

    author = serializers.CharField()
    body = serializers.CharField()
    revision = serializers.IntegerField()
    at = serializers.DateTimeField()


class ChangeRequestDetailSerializer(ChangeRequestSerializer):
    verdicts = VerdictSerializer(many=True)
    comments = CommentSerializer(many=True)
    diff = serializers.DictField(allow_null=True, help_text="base → draft, as /diff/ answers")


class ChangeRequestQuerySerializer(ApiSerializer):
    state = serializers.ChoiceField(choices=ChangeRequest.State.values, required=False)
