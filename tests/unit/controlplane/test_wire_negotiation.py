"""Negotiating a document's encoding (controlplane/wire.py; docs/PROTOCOL.md, "Binary frames and
compression"): JSON unless protobuf is preferred, never a 406; compressed when accepted, with
the same JSON; Vary says so; the poll's If-None-Match works with either ETag."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.wire import accepts_protobuf
from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec, compression
from routing_policies.models import PolicyVersion

pytestmark = pytest.mark.django_db

POLICY = "/api/v1/devices/me/policy"


@pytest.mark.parametrize(
    ("accept", "protobuf"),
    [
        ("", False),
        ("application/json", False),
        ("*/*", False),
        (PROTOBUF_MEDIA_TYPE, True),
        ("application/protobuf", True),
        (f"{PROTOBUF_MEDIA_TYPE}, application/json;q=0.5", True),
        (f"application/json, {PROTOBUF_MEDIA_TYPE};q=0.9", False),
        (f"{PROTOBUF_MEDIA_TYPE};q=0", False),
        (f"*/*;q=0.1, {PROTOBUF_MEDIA_TYPE};q=0.2", True),
        (f"{PROTOBUF_MEDIA_TYPE};q=nonsense", False),
    ],
)
def test_accepts_protobuf__q_values__protobuf_only_when_preferred(
    accept: str, protobuf: bool
) -> None:
    assert accepts_protobuf(accept) is protobuf


@pytest.fixture
def device(api_client: APIClient, fleet: Any, fleet_key: str) -> APIClient:
    answer = api_client.post(
        "/api/v1/devices/enroll",
        {"fleet_key": fleet_key, "device_id": "phone-1", "platform": "android"},
        format="json",
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['device_token']}")
    return client


def test_device_policy__accept_protobuf_only__protobuf_never_406(
    device: APIClient, fleet: Any
) -> None:
    # Given / When a device that reads only protobuf polls
    response = device.get(POLICY, HTTP_ACCEPT=PROTOBUF_MEDIA_TYPE)

    # Then it gets v1's document in protobuf, with the weak form of v1's tag, varying by Accept
    v1 = PolicyVersion.objects.get(fleet=fleet, number=1)
    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF_MEDIA_TYPE
    assert response["ETag"] == f"W/{v1.etag}"
    assert {"Accept", "Accept-Encoding"} <= {v.strip() for v in response["Vary"].split(",")}
    plain = device.get(POLICY)
    assert codec.document_from_protobuf(response.content) == plain.json()
    # and its tag answers 304 next time
    assert device.get(POLICY, HTTP_IF_NONE_MATCH=response["ETag"]).status_code == 304


@pytest.mark.parametrize("coding", compression.CODINGS)
def test_device_policy__accept_encoding__same_json_compressed_same_etag(
    device: APIClient, coding: str
) -> None:
    # Given the plain answer
    plain = device.get(POLICY)

    # When the device accepts a content coding
    response = device.get(POLICY, HTTP_ACCEPT_ENCODING=f"{coding}, identity;q=0.5")

    # Then the same JSON bytes come compressed, with the same strong ETag
    assert response["Content-Encoding"] == coding
    assert response["Content-Type"] == "application/json"
    assert compression.inflate(response.content, coding, limit=10**6) == plain.content
    assert response["ETag"] == plain["ETag"]
    assert not plain.has_header("Content-Encoding")
