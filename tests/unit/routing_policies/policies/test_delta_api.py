"""Policy deltas over HTTP (docs/PROTOCOL.md, "Policy deltas"): `?since=N` on the immutable
document and on the polling path, `A-IM: policy-delta` beside `If-None-Match` (226 IM Used)."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from edge_sdk.delta import apply_delta, canonical_bytes
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec, compression
from routing_policies.services import device_enroll, fleet_switch_version

pytestmark = pytest.mark.django_db

POLL = "/api/v1/devices/me/policy"
IMMUTABLE = "public, max-age=31536000, immutable"
BAD_SINCE = ["abc", "1.5", "-1", "0", "2147483648", "1\x00", "9" * 2000, "", "1e3", "0x10"]


def _doc_url(fleet: Any, number: int) -> str:
    return f"/api/v1/fleets/{fleet.slug}/documents/{number}"


@pytest.fixture
def two_versions(fleet: Any, publish_version: Callable[..., Any], api_client: APIClient) -> Any:
    """v1 (the fixture's) and v2 with one cell's θ changed; their documents."""
    publish_version(fleet, threshold=0.8)
    return [api_client.get(_doc_url(fleet, n)).json() for n in (1, 2)]


@pytest.fixture
def device_on_v2(fleet: Any, fleet_key: str, publisher: Any, two_versions: Any) -> APIClient:
    """A device whose fleet has been switched to v2."""
    fleet_switch_version(actor=publisher, fleet=fleet, version=2)
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-1")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_published_document__since_kept_base__200_delta_cacheable_applies_to_the_target(
    fleet: Any, two_versions: Any, api_client: APIClient
) -> None:
    # Given v1 and v2 (one cell differs)
    v1, v2 = two_versions

    # When v2 is asked for since v1, without a token (a CDN)
    response = api_client.get(_doc_url(fleet, 2), {"since": 1})

    # Then the answer is the delta, cacheable for a year under its own ETag, much smaller
    assert response.status_code == 200
    assert response["IM"] == "policy-delta"
    assert response["Cache-Control"] == IMMUTABLE
    assert response["ETag"] == v2["etag"][:-1] + '-since1"'
    delta = response.json()
    assert (delta["base"], delta["version"]) == (1, 2)
    assert len(response.content) * 5 < len(api_client.get(_doc_url(fleet, 2)).content)
    # And applied to v1 it gives v2, byte-equal after canonical encoding
    assert canonical_bytes(apply_delta(v1, delta)) == canonical_bytes(v2)


@pytest.mark.parametrize("since", [99, 2**31 - 1])
def test_published_document__since_unknown_version__200_whole_document(
    since: int, fleet: Any, two_versions: Any, api_client: APIClient
) -> None:
    # When v2 is asked for since a version the fleet never had
    response = api_client.get(_doc_url(fleet, 2), {"since": since})

    # Then the answer is v2's whole document with v2's ETag
    assert response.status_code == 200
    assert "IM" not in response
    assert response.json() == two_versions[1]
    assert response["ETag"] == two_versions[1]["etag"]


def test_published_document__since_beyond_the_window__200_whole_document(
    fleet: Any, two_versions: Any, api_client: APIClient, settings: Any
) -> None:
    # Given a control plane that keeps no delta between versions one apart
    settings.POLICY_DELTA_WINDOW = 0

    # When v2 is asked for since v1 (a version it no longer makes deltas from)
    response = api_client.get(_doc_url(fleet, 2), {"since": 1})

    # Then the whole document is answered
    assert response.status_code == 200
    assert response.json() == two_versions[1]


@pytest.mark.parametrize("since", BAD_SINCE)
@pytest.mark.parametrize("endpoint", ["document", "poll"])
def test_delta_endpoints__bad_since__400_naming_since(
    since: str, endpoint: str, fleet: Any, device_on_v2: APIClient
) -> None:
    # When either endpoint is asked with a malformed, out-of-range, NUL-bearing or oversized
    # `since`
    client = device_on_v2 if endpoint == "poll" else APIClient()
    url = POLL if endpoint == "poll" else _doc_url(fleet, 2)
    response = client.get(url, {"since": since})

    # Then it is a 400 naming `since`, never a 5xx
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"][0]["field"] == "since"


@pytest.mark.parametrize("endpoint", ["document", "poll"])
def test_delta_endpoints__since_twice__400_naming_since(
    endpoint: str, fleet: Any, device_on_v2: APIClient
) -> None:
    client = device_on_v2 if endpoint == "poll" else APIClient()
    url = POLL if endpoint == "poll" else _doc_url(fleet, 2)
    response = client.get(f"{url}?since=1&since=1")
    assert response.status_code == 400
    assert response.json()["error"]["details"][0] == {
        "field": "since",
        "message": "Given more than once.",
    }


def test_device_policy__a_im_with_the_held_etag__226_delta_with_the_assigned_etag(
    device_on_v2: APIClient, two_versions: Any
) -> None:
    # Given a device holding v1, assigned v2
    v1, v2 = two_versions

    # When it polls with v1's ETag and A-IM: policy-delta
    response = device_on_v2.get(
        POLL, HTTP_IF_NONE_MATCH=v1["etag"], HTTP_A_IM="feed, policy-delta;q=1"
    )

    # Then it gets 226 IM Used with the delta, and v2's ETag (RFC 3229: the instance's)
    assert response.status_code == 226
    assert response["IM"] == "policy-delta"
    assert response["ETag"] == v2["etag"]
    assert response["Cache-Control"] == "no-cache"
    assert canonical_bytes(apply_delta(v1, response.json())) == canonical_bytes(v2)


def test_device_policy__since__226_delta(device_on_v2: APIClient, two_versions: Any) -> None:
    v1, v2 = two_versions
    response = device_on_v2.get(POLL, {"since": 1})
    assert response.status_code == 226
    assert canonical_bytes(apply_delta(v1, response.json())) == canonical_bytes(v2)


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no A-IM: a device that does not know deltas
        {"HTTP_A_IM": "vcdiff"},  # an instance manipulation the server does not make
        {"HTTP_A_IM": "policy-delta", "HTTP_IF_NONE_MATCH": '"v1-0000000000000000"'},  # not v1's
        {"HTTP_A_IM": "policy-delta", "HTTP_IF_NONE_MATCH": '"x"'},  # not a version's tag
    ],
)
def test_device_policy__no_usable_base__200_whole_document(
    headers: dict[str, str], device_on_v2: APIClient, two_versions: Any
) -> None:
    response = device_on_v2.get(POLL, **headers)
    assert response.status_code == 200
    assert response.json() == two_versions[1]


def test_device_policy__a_im_with_the_current_etag__304(
    device_on_v2: APIClient, two_versions: Any
) -> None:
    response = device_on_v2.get(
        POLL, HTTP_IF_NONE_MATCH=two_versions[1]["etag"], HTTP_A_IM="policy-delta"
    )
    assert response.status_code == 304


def test_device_policy__since_without_a_token__401(fleet: Any, two_versions: Any) -> None:
    response = APIClient().get(POLL, {"since": 1}, HTTP_A_IM="policy-delta")
    assert response.status_code == 401


# --- in protobuf, when the device negotiated it (docs/PROTOCOL.md, "Binary frames") ------------

PROTOBUF_ACCEPT = "application/x-protobuf, application/json;q=0.5"


def test_published_document__since_with_protobuf_accepted__policy_delta_message(
    fleet: Any, two_versions: Any, api_client: APIClient
) -> None:
    # Given v1 and v2, and the JSON delta a device that did not ask for protobuf gets
    v1, v2 = two_versions
    as_json = api_client.get(_doc_url(fleet, 2), {"since": 1})

    # When v2 is asked for since v1 with protobuf preferred
    response = api_client.get(_doc_url(fleet, 2), {"since": 1}, HTTP_ACCEPT=PROTOBUF_ACCEPT)

    # Then the delta comes as a PolicyDelta, cacheable, under the weak form of the pair's tag
    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF_MEDIA_TYPE
    assert response["IM"] == "policy-delta"
    assert response["Cache-Control"] == IMMUTABLE
    assert response["ETag"] == "W/" + as_json["ETag"]
    assert "Accept" in response["Vary"]
    assert len(response.content) < len(as_json.content)
    # And it is the JSON delta, which applied to v1 gives v2, byte-equal after canonical encoding
    delta = codec.delta_from_protobuf(response.content)
    assert canonical_bytes(delta) == canonical_bytes(as_json.json())
    assert canonical_bytes(apply_delta(v1, delta)) == canonical_bytes(v2)


@pytest.mark.parametrize("coding", compression.CODINGS)
def test_device_policy__a_im_with_protobuf_accepted__226_policy_delta_compressed(
    device_on_v2: APIClient, two_versions: Any, coding: str
) -> None:
    # Given a device holding v1, assigned v2, that reads protobuf and a content coding
    v1, v2 = two_versions

    # When it polls with v1's ETag and A-IM: policy-delta
    response = device_on_v2.get(
        POLL,
        HTTP_IF_NONE_MATCH=v1["etag"],
        HTTP_A_IM="policy-delta",
        HTTP_ACCEPT=PROTOBUF_ACCEPT,
        HTTP_ACCEPT_ENCODING=coding,
    )

    # Then 226 with the delta as a PolicyDelta, compressed, tagged (weakly) as v2
    assert response.status_code == 226
    assert response["IM"] == "policy-delta"
    assert response["Content-Type"] == PROTOBUF_MEDIA_TYPE
    assert response["Content-Encoding"] == coding
    assert response["ETag"] == "W/" + v2["etag"]
    raw = compression.inflate(response.content, coding, limit=1 << 20)
    assert canonical_bytes(apply_delta(v1, codec.delta_from_protobuf(raw))) == canonical_bytes(v2)
    # And with that tag the next poll is a 304
    again = device_on_v2.get(POLL, HTTP_IF_NONE_MATCH=response["ETag"], HTTP_A_IM="policy-delta")
    assert again.status_code == 304


def test_delta_chain_in_protobuf__ends_byte_equal_to_the_whole_document(
    fleet: Any, publish_version: Callable[..., Any], api_client: APIClient
) -> None:
    # Given five versions, each changing one cell's θ
    for threshold in (0.8, 0.65, 0.9, 0.55):
        publish_version(fleet, threshold=threshold)
    held = api_client.get(_doc_url(fleet, 1)).json()

    # When a device walks from v1 to v5 by protobuf deltas, one version at a time
    for number in range(2, 6):
        response = api_client.get(
            _doc_url(fleet, number), {"since": number - 1}, HTTP_ACCEPT=PROTOBUF_ACCEPT
        )
        assert response["IM"] == "policy-delta"
        held = apply_delta(held, codec.delta_from_protobuf(response.content))

    # Then what it holds is v5's whole document, byte-equal after canonical encoding, and the
    # whole document in protobuf says the same
    whole = api_client.get(_doc_url(fleet, 5)).json()
    assert canonical_bytes(held) == canonical_bytes(whole)
    as_protobuf = api_client.get(_doc_url(fleet, 5), HTTP_ACCEPT=PROTOBUF_ACCEPT)
    assert canonical_bytes(codec.document_from_protobuf(as_protobuf.content)) == canonical_bytes(
        whole
    )
