"""`GET /api/v1/fleets/{slug}/documents/{n}`: a published version's document, immutable and
cacheable by anyone (a CDN), the same bytes a device polls, with its strong ETag and 304."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.services import device_enroll

pytestmark = pytest.mark.django_db

IMMUTABLE = "public, max-age=31536000, immutable"


def _url(fleet: Any, number: int) -> str:
    return f"/api/v1/fleets/{fleet.slug}/documents/{number}"


def test_published_document__anonymous__immutable_headers_and_the_polled_bytes(
    fleet: Any, fleet_key: str, api_client: APIClient
) -> None:
    # Given a device on v1
    _, token = device_enroll(fleet_key=fleet_key, device_id="phone-1")
    device = APIClient()
    device.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    polled = device.get("/api/v1/devices/me/policy")

    # When anyone (a CDN) asks for v1's document, without a token, accepting anything
    response = api_client.get(_url(fleet, 1), HTTP_ACCEPT="text/html")

    # Then it is the device's policy byte for byte, cacheable for a year, with a strong ETag
    assert response.status_code == 200
    assert response.content == polled.content
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == IMMUTABLE
    assert response["ETag"] == polled["ETag"]
    assert not response["ETag"].startswith("W/")
    assert response.json()["etag"] == response["ETag"]


@pytest.mark.parametrize("sent", ["{etag}", "W/{etag}", '"other", {etag}', "*"])
def test_published_document__if_none_match__304_with_the_same_headers(
    sent: str, fleet: Any, api_client: APIClient
) -> None:
    # Given the document's ETag
    etag = api_client.get(_url(fleet, 1))["ETag"]

    # When it is sent back (as is, weakened by a proxy, in a list, or *)
    response = api_client.get(_url(fleet, 1), HTTP_IF_NONE_MATCH=sent.format(etag=etag))

    # Then the answer is 304 with no body, still immutable
    assert response.status_code == 304
    assert response.content == b""
    assert response["ETag"] == etag
    assert response["Cache-Control"] == IMMUTABLE


def test_published_document__another_versions_etag__200(
    fleet: Any, publish_version: Callable[..., Any], api_client: APIClient
) -> None:
    # Given v2 published, and v1's ETag
    publish_version(fleet, threshold=0.8)
    etag_v1 = api_client.get(_url(fleet, 1))["ETag"]

    # When v2 is asked for with v1's ETag
    response = api_client.get(_url(fleet, 2), HTTP_IF_NONE_MATCH=etag_v1)

    # Then it is v2's document
    assert response.status_code == 200
    assert response.json()["version"] == 2
    assert response["ETag"] != etag_v1


@pytest.mark.parametrize("number", [0, 2, 99, 2**31, 10**30])
def test_published_document__not_published__404(
    number: int, fleet: Any, api_client: APIClient
) -> None:
    # Given a fleet with v1 only (and a draft would not count)
    # When another number is asked for
    response = api_client.get(_url(fleet, number))

    # Then 404, not cacheable for a year
    assert response.status_code == 404
    assert response.get("Cache-Control") != IMMUTABLE


def test_published_document__unknown_fleet__404(api_client: APIClient, db: None) -> None:
    assert api_client.get("/api/v1/fleets/nope/documents/1").status_code == 404


def test_published_document__bad_token__still_served(fleet: Any, api_client: APIClient) -> None:
    # Given a request with a token that is not any device's (a CDN forwarding headers)
    api_client.credentials(HTTP_AUTHORIZATION="Bearer dt_nothing")

    # Then the document is served all the same: it needs no token
    assert api_client.get(_url(fleet, 1)).status_code == 200
