"""A published version's policy document at a URL that never changes meaning: what an MQTT
device fetches when the retained document is not there (docs/PROTOCOL.md, "MQTT"), and what a
CDN may cache for a year.

No device token: the document is immutable and the same for every device of the fleet, so a
CDN serves one copy to all of them and could not check a per-device token anyway; it holds the
fleet's thresholds and prices, no device's data and no secret. (The operators' export of a
version, `GET /api/v1/fleets/{slug}/versions/{ref}/document`, keeps its role check.)
"""

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane import wire
from controlplane.exceptions import NotFound
from controlplane.openapi import json_or_protobuf

from ..policies import delta_api
from ..policies.apis import IF_NONE_MATCH
from ..policies.deltas import published_delta_json
from ..policies.selectors import fleet_get, published_version_get, version_document
from ..validation import MAX_VERSION

IMMUTABLE = "public, max-age=31536000, immutable"


class _JsonWhateverAccepted(BaseContentNegotiation):
    """One representation, whatever the Accept header: a shared cache keeps one copy."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


class PublishedDocumentApi(APIView):
    """Published version `number`'s policy document: immutable, cacheable by anyone for a year,
    with its strong ETag (If-None-Match → 304)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    # JSON by default: the same bytes as the device's policy (and the retained MQTT document),
    # whatever the Accept header; protobuf or compressed only when asked (`wire`).
    renderer_classes = [JSONRenderer]
    content_negotiation_class = _JsonWhateverAccepted

    @extend_schema(
        parameters=[
            delta_api.DeltaQuerySerializer,
            IF_NONE_MATCH,
            OpenApiParameter(
                "Cache-Control",
                str,
                OpenApiParameter.HEADER,
                description=f"`{IMMUTABLE}`",
                response=[200, 304],
            ),
            OpenApiParameter(
                "ETag",
                str,
                OpenApiParameter.HEADER,
                description="The version's strong ETag (its document's `etag`).",
                response=[200, 304],
            ),
        ],
        responses={
            **json_or_protobuf(
                200,
                delta_api.DOCUMENT_OR_DELTA,
                "`PolicyDocument`, or with `IM: policy-delta` a `PolicyDelta`; a weak ETag",
                f"The document, with `Cache-Control: {IMMUTABLE}` and its strong `ETag` (the "
                "version's etag, as in the document). With `since`, the delta from that version "
                "instead when the control plane makes one (`IM: policy-delta`, its own ETag; "
                'docs/PROTOCOL.md, "Policy deltas").',
            ),
            304: OpenApiResponse(description="Not modified: the ETag you sent is this version's."),
        },
        operation_id="published_document",
    )
    def get(self, request: Request, slug: str, number: int) -> HttpResponse:
        base, _ = delta_api.base_named(request, a_im=False)  # a bad `since`: 400
        fleet = fleet_get(slug=slug)
        version = (
            published_version_get(fleet_id=fleet.pk, number=number)
            if number <= MAX_VERSION
            else None
        )
        if version is None:
            raise NotFound(f"Fleet {fleet.slug!r} has no published version {number}.")
        # Compared weakly (RFC 9110): a proxy that compresses the body sends back W/"…".
        sent = [
            tag.strip().removeprefix("W/")
            for tag in request.headers.get("If-None-Match", "").split(",")
        ]
        # Policy deltas (policies/delta_api.py): `?since=N` answers the delta from N, a 200 a
        # CDN caches like the document (the pair never changes), or the whole document.
        response: HttpResponse
        if version.etag in sent or "*" in sent:
            response = Response(status=status.HTTP_304_NOT_MODIFIED)
            response["ETag"] = version.etag
        elif (
            base is not None
            and base != number
            and (delta := published_delta_json(fleet_id=fleet.pk, base=base, target=number))
        ):
            # Protobuf and compression when asked for, as for the document.
            response = wire.delta_response(request, delta)
            response["IM"] = delta_api.DELTA_IM
        else:
            document = version_document(version=version)
            # Protobuf and compression when asked for (docs/PROTOCOL.md, "Binary frames"); a
            # CDN keeps one copy per representation (Vary).
            response = wire.document_response(request, document) or Response(document)
        response["Cache-Control"] = IMMUTABLE
        if "IM" in response and base is not None:  # the delta: tagged as the pair
            etag = delta_api.delta_etag(version.etag, base)
            return wire.negotiated_document(request, response, etag=etag)
        return wire.negotiated_document(request, response, etag=version.etag)
