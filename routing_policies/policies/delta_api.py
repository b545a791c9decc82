"""Policy deltas over HTTP (docs/PROTOCOL.md, "Policy deltas"): the `since` query parameter and
the RFC 3229 `A-IM: policy-delta` request header, shared by the device's polling path and the
immutable document of a published version.

A request names the version the device holds by `?since=N`, or (polling) by `A-IM:
policy-delta` beside the `If-None-Match` ETag it already sends. The answer is the delta from that
version when the control plane makes one (`deltas.published_delta_json`), else the whole
document: a device never depends on the server keeping its base.
"""

import re
from typing import Final

from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.request import Request

from controlplane.exceptions import ValidationFailed
from controlplane.openapi import ApiSerializer, query_params_validate

from ..validation import MAX_VERSION
from .schemas import PolicyDocumentSerializer

__all__ = [
    "A_IM",
    "DELTA_IM",
    "DOCUMENT_OR_DELTA",
    "DeltaQuerySerializer",
    "PolicyDeltaSerializer",
    "base_named",
    "delta_etag",
]

DELTA_IM: Final = "policy-delta"  # the instance manipulation's name (RFC 3229 `A-IM` / `IM`)
# The ETag the control plane gives version N: `"vN-<16 hex>"` (routing_policies.documents).
_VERSION_ETAG: Final = re.compile(r'\A(?:W/)?"v([1-9][0-9]{0,9})-[0-9a-f]{1,64}"\Z')

A_IM = OpenApiParameter(
    "A-IM",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description=f"`{DELTA_IM}`: answer `226 IM Used` with the delta from the version whose ETag "
    "`If-None-Match` names, when the control plane makes one (docs/PROTOCOL.md, "
    '"Policy deltas").',
)


class DeltaQuerySerializer(ApiSerializer):
    """`?since=N`: the version the device holds; the answer is the delta from it when the
    control plane makes one, else the whole document."""

    component_name = "PolicyDeltaQuery"
    since = serializers.IntegerField(
        min_value=1,
        max_value=MAX_VERSION,
        required=False,
        help_text="The published version the device holds (1 to 2,147,483,647).",
    )


class PolicyDeltaSerializer(ApiSerializer):
    """A policy delta (docs/PROTOCOL.md, "Policy deltas"): the RFC 7386 merge patch of the
    document's keyed form from version `base` to `version`, and the target's hash."""

    component_name = "PolicyDelta"
    fleet = serializers.SlugField()
    base = serializers.IntegerField(help_text="The version the delta starts from.")
    version = serializers.IntegerField(help_text="The version it makes.")
    hash = serializers.CharField(
        help_text="`sha256:` and the hex SHA-256 of the target's RFC 8785 encoding."
    )
    patch = serializers.DictField(help_text="RFC 7386 merge patch of the keyed document.")
    order = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="The target's cell keys in order, when not the base's.",
    )


# The immutable document's answer to `?since=N`: the delta, or the whole document.
DOCUMENT_OR_DELTA = PolymorphicProxySerializer(
    component_name="PolicyDocumentOrDelta",
    serializers=[PolicyDocumentSerializer, PolicyDeltaSerializer],
    resource_type_field_name=None,
)


def _since(request: Request) -> int | None:
    if len(request.query_params.getlist("since")) > 1:
        raise ValidationFailed(
            "Query parameter `since` is invalid: given more than once.",
            details=[{"field": "since", "message": "Given more than once."}],
        )
    value: int | None = query_params_validate(DeltaQuerySerializer, request).get("since")
    return value


def _accepts_delta(request: Request) -> bool:
    """The request's `A-IM` names `policy-delta` (RFC 3229: a list, each with parameters)."""
    names = (
        item.split(";")[0].strip().lower() for item in request.headers.get("A-IM", "").split(",")
    )
    return DELTA_IM in names


def base_named(request: Request, *, a_im: bool) -> tuple[int | None, str | None]:
    """The version the request says the device holds, and the ETag it gave for it (to check
    that it names that version's content): `?since=N` (ETag unknown), else with `a_im` the
    version whose ETag `If-None-Match` names when `A-IM` asks for a delta. (None, None): none.
    A bad `since` is a 400 naming it."""
    since = _since(request)
    if since is not None:
        return since, None
    if not a_im or not _accepts_delta(request):
        return None, None
    for tag in request.headers.get("If-None-Match", "").split(","):
        match = _VERSION_ETAG.match(tag.strip())
        if match is not None and int(match.group(1)) <= MAX_VERSION:
            return int(match.group(1)), tag.strip().removeprefix("W/")
    return None, None


def delta_etag(target_etag: str, base: int) -> str:
    """The strong ETag of the delta from `base` to the version tagged `target_etag`."""
    return f'{target_etag[:-1]}-since{base}"'
