"""REST API under /api/v1/ for fleets, drafts, versions, diffs and the audit log.

Views are thin: parse input, call one service or selector, shape the output. Draft edits carry
the draft's revision, either as `If-Match: "r<revision>"` or as a `revision` field; a stale one
gets 409, a missing one 428.
"""

import functools
import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api import JsonSlugField, ViewerReadsApi, input_validate, require_object
from controlplane.exceptions import ApplicationError, ValidationFailed
from controlplane.openapi import ApiSerializer, error_responses
from controlplane.permissions import IsEditor, IsPublisher, IsViewer

from ..pricing import CloudPrice
from . import schemas, selectors, services
from .fleet_api import Answer, FleetAction, FleetActionApi, fleet_input, query_input
from .models import AuditEntry, Fleet, PolicyVersion

_IF_MATCH_RE = re.compile(r'^\s*(?:W/)?"r(\d+)"\s*$')


IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="An ETag you already have: 304 while it is still current.",
)
NOT_MODIFIED = OpenApiResponse(description="Not modified: the ETag you sent is still current.")


# A version as the diff names it: a number, `draft` or `latest`.
VERSION_REF_RE = re.compile(r"\A(?:[1-9][0-9]{0,8}|draft|latest)\Z")


# A draft edit names the revision it changes: a `revision` field of the body (a query parameter
# for a DELETE), or an `If-Match: "r<revision>"` header, which the schema leaves out so that
# one way is documented as required.
def _with_revision(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with the draft revision the client edits: an `If-Match: "r<n>"` header stands in
    for the `revision` field; neither is 428, so nobody's edit is overwritten."""
    header = request.headers.get("If-Match")
    if header:
        match = _IF_MATCH_RE.match(header)
        if not match:
            raise ValidationFailed(
                'If-Match must be the draft ETag, e.g. "r3".',
                details=[{"field": "If-Match", "message": f"not a draft revision: {header!r}"}],
            )
        return {**data, "revision": int(match.group(1))}
    if data.get("revision") is None:
        raise ApplicationError(
            "Say which draft revision you are changing (If-Match header or `revision` field), "
            "so nobody's edit is overwritten.",
            code="revision_required",
            status=428,
        )
    return data


def _validated(
    serializer_class: type[serializers.Serializer[Any]], data: dict[str, Any]
) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# A draft edit's body, checked with the revision it names (the body's or the If-Match header's).
_draft_edit_input = functools.partial(fleet_input, validate=_validated, body_step=_with_revision)
_draft_edit = functools.partial(FleetAction, validate=_validated, body_step=_with_revision)


def _revision(
    request: Request, data: dict[str, Any], documented: type[serializers.Serializer[Any]]
) -> int:
    """The draft revision of a body that has no other field, validated by the `revision` field
    of the serializer that documents it."""
    revision = _with_revision(request, data)["revision"]
    try:
        return int(documented().fields["revision"].run_validation(revision))
    except serializers.ValidationError as exc:
        raise ValidationFailed(
            "`revision` must be a positive whole number.",
            details=[{"field": "revision", "message": " ".join(map(str, exc.detail))}],
        ) from None


def _delete_revision(request: Request) -> int:
    """A DELETE's draft revision: `?revision=` (a DELETE has no body in OpenAPI), a body field or
    the If-Match header."""
    data = require_object(request.data)
    query = request.query_params.get("revision")
    if data.get("revision") is None and query is not None:
        data = {"revision": query}
    return _revision(request, data, schemas.RevisionQuerySerializer)


def _user_name(user: Any) -> str | None:
    return user.get_username() if user is not None else None


def fleet_out(fleet: selectors.FleetWithState) -> dict[str, Any]:
    """A fleet with its latest published version and draft state (annotated, no extra query)."""
    return {
        "slug": fleet.slug,
        "name": fleet.name,
        "description": fleet.description,
        "created_at": fleet.created_at,
        "latest_version": fleet.latest_number,
        "draft_revision": fleet.draft_revision,
        "cloud_price_per_1k_tokens": fleet.cloud_price_per_1k_tokens,
        "cloud_price_per_call": fleet.cloud_price_per_call,
        "currency": CloudPrice.of_fleet(fleet).currency,
    }


def version_out(version: PolicyVersion) -> dict[str, Any]:
    """Metadata of a version (without cells)."""
    return {
        "version": version.number,
        "status": "draft" if version.is_draft else "published",
        "revision": version.revision if version.is_draft else None,
        "etag": version.etag or None,
        "note": version.note,
        "based_on": version.based_on.number if version.based_on else None,
        "created_by": _user_name(version.created_by),
        "created_at": version.created_at,
        "published_by": _user_name(version.published_by),
        "published_at": version.published_at,
        "cell_count": len(selectors.cell_keys(dimensions=version.dimensions)),
    }


def draft_out(version: PolicyVersion) -> dict[str, Any]:
    """The draft: metadata, revision and its table in the document shape."""
    return {**version_out(version), "document": selectors.version_document(version=version)}


def _draft_response(version: PolicyVersion, status_code: int = 200) -> Response:
    response = Response(draft_out(version), status=status_code)
    response["ETag"] = f'"r{version.revision}"'
    return response


def audit_out(entry: AuditEntry) -> dict[str, Any]:
    """One audit entry."""
    return {
        "id": entry.pk,
        "at": entry.created_at,
        "actor": entry.actor_name,
        "action": entry.action,
        "fleet": entry.fleet.slug if entry.fleet else None,
        "target": entry.target,
        "summary": entry.summary,
        "before": entry.before,
        "after": entry.after,
        "diff": entry.diff,
    }


class FleetListApi(APIView):
    """List fleets; publishers create them."""

    def get_permissions(self) -> list[Any]:
        return [IsPublisher()] if self.request.method == "POST" else [IsViewer()]

    @extend_schema(operation_id="v1_fleets_list", responses=schemas.FleetListSerializer)
    def get(self, request: Request) -> Response:
        return Response({"results": [fleet_out(f) for f in selectors.fleet_list()]})

    @extend_schema(
        request=schemas.FleetCreateInputSerializer,
        responses={201: schemas.FleetSerializer, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        values = _validated(schemas.FleetCreateInputSerializer, require_object(request.data))
        fleet = services.fleet_create(actor=request.user, **values)
        return Response(
            fleet_out(selectors.fleet_state_get(slug=fleet.slug)), status=status.HTTP_201_CREATED
        )


class FleetDetailApi(APIView):
    """One fleet; publishers set its cloud price (PATCH)."""

    def get_permissions(self) -> list[Any]:
        return [IsPublisher()] if self.request.method == "PATCH" else [IsViewer()]

    @extend_schema(responses=schemas.FleetSerializer)
    def get(self, request: Request, slug: str) -> Response:
        return Response(fleet_out(selectors.fleet_state_get(slug=slug)))

    @extend_schema(
        request=schemas.FleetCloudPriceInputSerializer, responses=schemas.FleetSerializer
    )
    def patch(self, request: Request, slug: str) -> Response:
        # Closed: a fleet's cloud price is all PATCH changes; absent keeps a part, null is refused.
        values = input_validate(
            schemas.FleetCloudPriceInputSerializer,
            require_object(request.data),
            message="The cloud price is invalid: nothing was changed.",
        )
        services.fleet_cloud_price_set(
            actor=request.user,
            fleet=selectors.fleet_get(slug=slug),
            per_1k_tokens=values.get("cloud_price_per_1k_tokens"),
            per_call=values.get("cloud_price_per_call"),
        )
        return Response(fleet_out(selectors.fleet_state_get(slug=slug)))


class VersionListApi(APIView):
    """Every version of a fleet, the draft first."""

    @extend_schema(operation_id="v1_fleets_versions_list", responses=schemas.VersionListSerializer)
    def get(self, request: Request, slug: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        return Response({"results": [version_out(v) for v in selectors.versions_list(fleet=fleet)]})


class VersionDetailApi(APIView):
    """A version's metadata and document; `ref` is a number, `draft` or `latest`."""

    @extend_schema(responses=schemas.VersionWithDocumentSerializer)
    def get(self, request: Request, slug: str, ref: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        version = selectors.version_get(fleet=fleet, ref=ref)
        return Response(
            {**version_out(version), "document": selectors.version_document(version=version)}
        )


class VersionDocumentApi(APIView):
    """The policy document of PROTOCOL.md (the export format), with ETag / If-None-Match."""

    class QuerySerializer(ApiSerializer):
        component_name = "VersionDocumentQuery"
        download = serializers.BooleanField(
            required=False, help_text="true: answer as an attachment (Content-Disposition)"
        )

    @query_input(
        QuerySerializer,
        parameters=(IF_NONE_MATCH,),
        responses={200: schemas.PolicyDocumentSerializer, 304: NOT_MODIFIED},
    )
    def get(self, request: Request, slug: str, ref: str, query: dict[str, Any]) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        version = selectors.version_get(fleet=fleet, ref=ref)
        etag = version.etag if not version.is_draft else f'"r{version.revision}"'
        # If-None-Match compares weakly (RFC 9110): a proxy that compresses the body turns our
        # tag into W/"…", and the client sends that back.
        sent = [
            t.strip().removeprefix("W/")
            for t in request.headers.get("If-None-Match", "").split(",")
        ]
        if etag and (etag in sent or "*" in sent):
            response = Response(status=status.HTTP_304_NOT_MODIFIED)
        else:
            response = Response(selectors.version_document(version=version))
        response["ETag"] = etag
        if query.get("download"):
            response["Content-Disposition"] = (
                f'attachment; filename="{fleet.slug}-{version.label}.json"'
            )
        return response


class DraftApi(ViewerReadsApi):
    """Read, start (from the latest or a chosen version) and discard the fleet's draft."""

    change_permission = IsEditor

    @extend_schema(responses=schemas.VersionWithDocumentSerializer)
    def get(self, request: Request, slug: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        return _draft_response(selectors.version_get(fleet=fleet, ref="draft"))

    @fleet_input(
        schemas.DraftCreateInputSerializer,
        validate=_validated,
        responses={201: schemas.VersionWithDocumentSerializer, **error_responses(409)},
    )
    def post(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Response:
        draft = services.policy_draft_create(
            actor=request.user, fleet=fleet, from_number=data.get("from_version")
        )
        return _draft_response(draft, status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[schemas.RevisionQuerySerializer],
        responses={204: None, **error_responses(409, 428)},
    )
    def delete(self, request: Request, slug: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        services.policy_draft_discard(
            actor=request.user,
            fleet=fleet,
            revision=_delete_revision(request),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


def _cells_validated(
    serializer_class: type[serializers.Serializer[Any]], data: dict[str, Any]
) -> dict[str, Any]:
    """A cells edit checked by `schemas.draft_cells_input` (with `serializer_class`, its
    DraftCellsEditSerializer): the revision, the edits that pass and the others' problems."""
    revision, edits, refused = schemas.draft_cells_input(data)
    return {"revision": revision, "edits": edits, "refused": refused}


class _DraftEditApi(FleetActionApi):
    """A draft edit: `service(actor, fleet, **checked body)` edits the draft, which is answered
    (with its ETag) at the answer's code."""

    service: Callable[..., PolicyVersion]

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Response:
        draft = type(self).service(actor=request.user, fleet=fleet, **data)
        return _draft_response(draft, self.answer.code)


class DraftCellsApi(_DraftEditApi):
    """Edit one or several cells of the draft at once (all or nothing)."""

    does = _draft_edit(
        IsEditor, schemas.DraftCellsEditSerializer, method="patch", validate=_cells_validated
    )
    answer = Answer(schemas.VersionWithDocumentSerializer, errors=(409, 428))
    service = services.policy_draft_update_cells


class DraftDimensionsApi(_DraftEditApi):
    """Add a value to a dimension (and the cells it implies)."""

    does = _draft_edit(IsEditor, schemas.DimensionValueAddInputSerializer)
    answer = Answer(schemas.VersionWithDocumentSerializer, 201, errors=(409, 428))
    service = services.policy_draft_add_dimension_value


class DraftDimensionValueApi(APIView):
    """Remove a value from a dimension together with its cells."""

    permission_classes = [IsEditor]

    @extend_schema(
        parameters=[schemas.RevisionQuerySerializer],
        responses={200: schemas.VersionWithDocumentSerializer, **error_responses(409, 428)},
    )
    def delete(self, request: Request, slug: str, dimension: str, value: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        draft = services.policy_draft_remove_dimension_value(
            actor=request.user,
            fleet=fleet,
            revision=_delete_revision(request),
            dimension=dimension,
            value=value,
        )
        return _draft_response(draft)


class DraftImportApi(APIView):
    """Replace the draft's table with a policy document (the export format)."""

    permission_classes = [IsEditor]

    @extend_schema(
        request=schemas.PolicyDocumentImportSerializer,
        responses={200: schemas.VersionWithDocumentSerializer, **error_responses(409, 428)},
    )
    def put(self, request: Request, slug: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        document = require_object(request.data)
        # Without a draft the import starts one: no revision is needed (nor read).
        has_draft = selectors.draft_get(fleet=fleet) is not None
        if has_draft:
            document = _with_revision(request, document)
        document = schemas.document_input(document, with_revision=has_draft)
        revision = document["revision"] if has_draft else None
        draft = services.policy_draft_import(
            actor=request.user, fleet=fleet, document=document, revision=revision
        )
        return _draft_response(draft)


class DraftOverrideApi(APIView):
    """Set or remove a segment's override of cells in the draft (docs/segments.md)."""

    permission_classes = [IsEditor]

    @_draft_edit_input(
        schemas.DraftOverrideInputSerializer,
        responses={200: schemas.VersionWithDocumentSerializer, **error_responses(404, 409, 428)},
    )
    def put(self, request: Request, fleet: Fleet, data: dict[str, Any], segment: str) -> Response:
        draft = services.policy_draft_override_set(
            actor=request.user,
            fleet=fleet,
            revision=data["revision"],
            segment=segment,
            cells=schemas.draft_override_input(data),
            position=data.get("position"),
        )
        return _draft_response(draft)

    @extend_schema(
        parameters=[schemas.RevisionQuerySerializer],
        responses={200: schemas.VersionWithDocumentSerializer, **error_responses(404, 409, 428)},
    )
    def delete(self, request: Request, slug: str, segment: str) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        draft = services.policy_draft_override_remove(
            actor=request.user, fleet=fleet, revision=_delete_revision(request), segment=segment
        )
        return _draft_response(draft)


class PublishApi(FleetActionApi):
    """Publish the draft as the next numbered, immutable version."""

    does = _draft_edit(IsPublisher, schemas.PublishInputSerializer)
    answer = Answer(schemas.VersionSerializer, 201, errors=(409, 428))

    def act(self, request: Request, fleet: Fleet, data: dict[str, Any]) -> Response:
        version = services.policy_version_publish(actor=request.user, fleet=fleet, **data)
        response = Response(version_out(version), status=status.HTTP_201_CREATED)
        response["ETag"] = version.etag
        return response


class DiffApi(APIView):
    """Field-by-field diff between two versions (`a`, `b`: numbers, `draft` or `latest`)."""

    class QuerySerializer(ApiSerializer):
        component_name = "DiffQuery"
        a = serializers.RegexField(
            VERSION_REF_RE, trim_whitespace=False, help_text="a version number, draft or latest"
        )
        b = serializers.RegexField(
            VERSION_REF_RE, trim_whitespace=False, help_text="a version number, draft or latest"
        )

    @query_input(QuerySerializer, responses=schemas.DiffSerializer)
    def get(self, request: Request, slug: str, query: dict[str, Any]) -> Response:
        fleet = selectors.fleet_get(slug=slug)
        return Response(selectors.version_diff(fleet=fleet, a=query["a"], b=query["b"]))


class AuditApi(APIView):
    """The audit log, newest first; `?fleet=` narrows it to one fleet."""

    class QuerySerializer(ApiSerializer):
        component_name = "AuditQuery"
        fleet = JsonSlugField(
            max_length=64, required=False, help_text="only this fleet's entries (on /audit/)"
        )
        limit = serializers.IntegerField(min_value=1, max_value=1000, default=200)

    @query_input(
        QuerySerializer, responses={200: schemas.AuditListSerializer, **error_responses(404)}
    )
    def get(self, request: Request, query: dict[str, Any], slug: str | None = None) -> Response:
        fleet_slug = slug or query.get("fleet")
        fleet = selectors.fleet_get(slug=fleet_slug) if fleet_slug else None
        entries = selectors.audit_list(fleet=fleet, limit=query["limit"])
        return Response({"results": [audit_out(e) for e in entries]})
