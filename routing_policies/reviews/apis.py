"""REST API of change governance: the fleet's freeze and its release, review settings, change
requests (open, comment, approve, reject, withdraw, publish) and what waits for me."""

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import input_validate, require_object
from controlplane.exceptions import NotFound
from controlplane.openapi import error_responses
from controlplane.permissions import IsEditor, IsPublisher, IsViewer

from ..policies.apis import version_out
from ..policies.fleet_api import Answer, FleetAction, FleetActionApi, FleetReadApi, query_input
from ..policies.models import Fleet
from ..policies.schemas import VersionSerializer
from ..policies.selectors import fleet_get
from . import schemas, selectors, services


def _detail(fleet: Fleet, request_id: int, code: int = 200) -> Response:
    detail = selectors.change_request_detail(fleet=fleet, request_id=request_id)
    if detail is None:
        raise NotFound(f"Fleet {fleet.slug!r} has no change request {request_id}.")
    return Response(detail, status=code)


class FleetFreezeApi(APIView):
    """Whether the fleet's rollouts are frozen after an automatic rollback, and why."""

    permission_classes = [IsViewer]

    @extend_schema(responses=schemas.FleetFreezeSerializer, operation_id="fleet_freeze")
    def get(self, request: Request, slug: str) -> Response:
        return Response(selectors.fleet_freeze(fleet=fleet_get(slug=slug)))


class FleetFreezeReleaseApi(FleetActionApi):
    """Acknowledge the freeze's reason with a note: rollouts may start again."""

    does = FleetAction(IsPublisher, schemas.NoteInputSerializer, "fleet_freeze_release")
    answer = Answer(schemas.FleetFreezeSerializer, errors=(409,))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        services.fleet_freeze_release(actor=request.user, fleet=fleet, **data)
        return selectors.fleet_freeze(fleet=fleet)


class ReviewSettingsApi(FleetActionApi):
    """What of the fleet needs another publisher's approval (publishers change it)."""

    does = FleetAction(
        IsPublisher,
        schemas.ReviewSettingsSerializer,
        "review_settings_update",
        "put",
        reads=IsViewer,
    )
    answer = Answer(schemas.ReviewSettingsOutSerializer)

    @extend_schema(responses=schemas.ReviewSettingsOutSerializer, operation_id="review_settings")
    def get(self, request: Request, slug: str) -> Response:
        return Response(selectors.review_settings_out(fleet=fleet_get(slug=slug)))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        services.review_settings_update(actor=request.user, fleet=fleet, **data)
        return selectors.review_settings_out(fleet=fleet)


class ChangeRequestListApi(FleetActionApi):
    """The fleet's change requests (newest first); editors open one."""

    does = FleetAction(
        IsEditor, schemas.ChangeRequestOpenSerializer, "change_request_open", reads=IsViewer
    )
    answer = Answer(schemas.ChangeRequestDetailSerializer, 201, errors=(409,))

    @query_input(
        schemas.ChangeRequestQuerySerializer,
        responses=schemas.ChangeRequestListSerializer,
        operation_id="change_request_list",
    )
    def get(self, request: Request, slug: str, query: dict[str, Any]) -> Response:
        fleet = fleet_get(slug=slug)
        return Response(
            {"results": selectors.change_request_list(fleet=fleet, state=query.get("state"))}
        )

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Any:
        opened = services.change_request_open(actor=request.user, fleet=fleet, **data)
        return _detail(fleet, opened.pk, 201)


class ChangeRequestDetailApi(FleetReadApi):
    """A change request: status at the current revision, verdicts, thread, diff."""

    answer = Answer(schemas.ChangeRequestDetailSerializer, errors=(404,))
    read_operation = "change_request_detail"

    def look(self, request: Request, fleet: Fleet, request_id: int) -> Response:
        return _detail(fleet, request_id)


class ChangeRequestCommentApi(FleetActionApi):
    """Add a comment to the thread."""

    does = FleetAction(IsEditor, schemas.CommentInputSerializer, "change_request_comment")
    answer = Answer(schemas.ChangeRequestDetailSerializer, 201, errors=(404,))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any], request_id: int) -> Any:
        services.change_request_comment(
            actor=request.user, fleet=fleet, request_id=request_id, **data
        )
        return _detail(fleet, request_id, 201)


class _VerdictApi(APIView):
    permission_classes = [IsPublisher]
    input_serializer: schemas.InputSerializer
    approve = True

    def post(self, request: Request, slug: str, request_id: int) -> Response:
        fleet = fleet_get(slug=slug)
        data = input_validate(self.input_serializer, require_object(request.data))
        service = (
            services.change_request_approve if self.approve else services.change_request_reject
        )
        service(actor=request.user, fleet=fleet, request_id=request_id, **data)
        return _detail(fleet, request_id)


def _verdict_schema(input_serializer: schemas.InputSerializer, operation_id: str) -> Any:
    """The OpenAPI description of a verdict: its input, the detail answered, 404 and 409."""
    return extend_schema_view(
        post=extend_schema(
            request=input_serializer,
            responses={200: schemas.ChangeRequestDetailSerializer, **error_responses(404, 409)},
            operation_id=operation_id,
        )
    )


@_verdict_schema(schemas.VerdictInputSerializer, "change_request_approve")
class ChangeRequestApproveApi(_VerdictApi):
    """Approve the revision you reviewed (another publisher than the author)."""

    input_serializer = schemas.VerdictInputSerializer


@_verdict_schema(schemas.RejectInputSerializer, "change_request_reject")
class ChangeRequestRejectApi(_VerdictApi):
    """Reject the revision you reviewed, with a note."""

    input_serializer = schemas.RejectInputSerializer
    approve = False


class ChangeRequestWithdrawApi(FleetActionApi):
    """Close the request without carrying it out (its author or a publisher)."""

    does = FleetAction(IsEditor, None, "change_request_withdraw")
    answer = Answer(schemas.ChangeRequestDetailSerializer, errors=(404, 409))

    def act(self, request: Request, fleet: Fleet, request_id: int) -> Response:
        services.change_request_withdraw(actor=request.user, fleet=fleet, request_id=request_id)
        return _detail(fleet, request_id)


class ChangeRequestPublishApi(FleetActionApi):
    """Publish an approved request's draft at the approved revision (the normal publish)."""

    does = FleetAction(IsPublisher, schemas.PublishInputSerializer, "change_request_publish")
    answer = Answer(VersionSerializer, 201, errors=(404, 409))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any], request_id: int) -> Any:
        version = services.change_request_publish(
            actor=request.user, fleet=fleet, request_id=request_id, **data
        )
        response = Response(version_out(version), status=201)
        response["ETag"] = version.etag
        return response


class ChangeRequestsForMeApi(APIView):
    """Open requests waiting for my review (publishers), and my own open requests."""

    permission_classes = [IsViewer]

    @extend_schema(
        responses=schemas.ChangeRequestsForMeSerializer, operation_id="change_requests_for_me"
    )
    def get(self, request: Request) -> Response:
        return Response(selectors.change_requests_for(user=request.user))
