"""REST API of segments: list and create, read, change and delete one, and the preview of a
rule (saved or not). Viewers read and preview; editors and up change segments (a segment
changes nothing devices run yet: no policy or rollout reads one)."""

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api import ViewerReadsApi
from controlplane.exceptions import NotFound
from controlplane.openapi import error_responses
from controlplane.permissions import IsEditor, IsViewer

from ..policies.fleet_api import Answer, FleetAction, FleetActionApi, fleet_input
from ..policies.models import Fleet
from ..policies.selectors import fleet_get
from . import schemas, selectors, services
from .models import Segment


def _segment(fleet: Fleet, name: str) -> Segment:
    segment = selectors.segment_get(fleet=fleet, name=name)
    if segment is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no segment {name!r}.")
    return segment


def _answer(fleet: Fleet, segment: Segment, status: int = 200) -> Response:
    preview = selectors.rule_preview(fleet=fleet, rule=segment.rule)
    return Response(selectors.segment_out(segment, preview), status=status)


class SegmentListApi(FleetActionApi):
    """The fleet's segments, each with how many enrolled devices it matches; editors add one."""

    does = FleetAction(IsEditor, schemas.SegmentInputSerializer, "segment_create", reads=IsViewer)
    answer = Answer(schemas.SegmentSerializer, 201, errors=(409,))

    @extend_schema(responses=schemas.SegmentListSerializer, operation_id="segment_list")
    def get(self, request: Request, slug: str) -> Response:
        return Response(selectors.segments_overview(fleet=fleet_get(slug=slug)))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        segment = services.segment_create(actor=request.user, fleet=fleet, **data)
        return _answer(fleet, segment, 201)


class SegmentPreviewApi(FleetActionApi):
    """How many enrolled devices an unsaved rule matches, of how many, with warnings (it
    matches none or all, or reads an attribute no device reports). Stores nothing."""

    does = FleetAction(IsViewer, schemas.RulePreviewInputSerializer, "segment_preview")
    answer = Answer(schemas.PreviewSerializer)

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        return selectors.rule_preview(fleet=fleet, rule=data["rule"])


class SegmentDetailApi(ViewerReadsApi):
    """One segment with its preview; editors change it (PATCH, with the revision read) or
    delete it."""

    change_permission = IsEditor

    @extend_schema(responses=schemas.SegmentSerializer, operation_id="segment_detail")
    def get(self, request: Request, slug: str, name: str) -> Response:
        fleet = fleet_get(slug=slug)
        return _answer(fleet, _segment(fleet, name))

    @fleet_input(
        schemas.SegmentUpdateSerializer,
        responses={200: schemas.SegmentSerializer, **error_responses(409)},
        operation_id="segment_update",
    )
    def patch(self, request: Request, fleet: Fleet, data: dict[str, Any], name: str) -> Response:
        segment = services.segment_update(
            actor=request.user, fleet=fleet, name=name, **schemas.update_arguments(data)
        )
        return _answer(fleet, segment)

    @extend_schema(
        request=None,
        responses={204: OpenApiResponse(description="Deleted.")},
        operation_id="segment_delete",
    )
    def delete(self, request: Request, slug: str, name: str) -> Response:
        services.segment_delete(actor=request.user, fleet=fleet_get(slug=slug), name=name)
        return Response(status=204)
