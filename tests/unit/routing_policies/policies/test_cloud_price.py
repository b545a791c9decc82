"""The fleet's cloud price: `CloudPrice`, and setting it with `PATCH /api/v1/fleets/<slug>/`."""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.models import AuditEntry, Fleet
from routing_policies.pricing import CloudPrice
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

URL = "/api/v1/fleets/fleet-a/"


def _price() -> tuple[float, float]:
    fleet = Fleet.objects.get(slug="fleet-a")
    return fleet.cloud_price_per_1k_tokens, fleet.cloud_price_per_call


def test_cloud_price__cost__tokens_and_calls_priced() -> None:
    # Given 0.002 per 1k tokens and 0.01 per call
    price = CloudPrice(per_1k_tokens=0.002, per_call=0.01)

    # When 3 calls carry 2,500 tokens in all
    cost = price.cost(tokens=2500, calls=3)

    # Then 2.5 × 0.002 + 3 × 0.01
    assert cost == pytest.approx(0.035)
    assert price.currency == "USD"


def test_cloud_price__new_fleet__defaults_in_api(
    client_as: Callable[[Any], APIClient], fleet: Any, viewer: Any
) -> None:
    # Given a new fleet; When a viewer reads it
    body = client_as(viewer).get(URL).json()

    # Then the default price is shown, and of_fleet reads the same
    assert (body["cloud_price_per_1k_tokens"], body["cloud_price_per_call"]) == (0.002, 0.0)
    assert body["currency"] == "USD"
    assert CloudPrice.of_fleet(fleet) == CloudPrice(per_1k_tokens=0.002, per_call=0.0)


def test_cloud_price__publisher_patches__stored_audited_answered(
    client_as: Callable[[Any], APIClient], fleet: Any, publisher: Any
) -> None:
    # When a publisher sets both parts
    response = client_as(publisher).patch(
        URL, {"cloud_price_per_1k_tokens": 0.003, "cloud_price_per_call": 0.0001}, format="json"
    )

    # Then the answer, the row and the audit log carry them
    assert response.status_code == 200, response.content
    assert response.json()["cloud_price_per_1k_tokens"] == 0.003
    assert _price() == (0.003, 0.0001)
    entry = AuditEntry.objects.get(action="fleet.cloud_price")
    assert entry.after == {"cloud_price_per_1k_tokens": 0.003, "cloud_price_per_call": 0.0001}


def test_cloud_price__one_part__other_kept(
    client_as: Callable[[Any], APIClient], fleet: Any, publisher: Any
) -> None:
    # When only the per-call price is sent (a whole number)
    response = client_as(publisher).patch(URL, {"cloud_price_per_call": 1}, format="json")

    # Then the per-token price is kept
    assert response.status_code == 200, response.content
    assert _price() == (0.002, 1.0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cloud_price_per_1k_tokens": -0.001}, "cloud_price_per_1k_tokens"),
        ({"cloud_price_per_call": -1}, "cloud_price_per_call"),
        ({"cloud_price_per_1k_tokens": 1e9}, "cloud_price_per_1k_tokens"),
        ({"cloud_price_per_call": 1001}, "cloud_price_per_call"),
        ({"cloud_price_per_1k_tokens": "0.003"}, "cloud_price_per_1k_tokens"),
        ({"cloud_price_per_call": True}, "cloud_price_per_call"),
        ({"cloud_price_per_call": [0.1]}, "cloud_price_per_call"),
        (
            {"cloud_price_per_1k_tokens": 0.003, "cloud_price_per_call": None},
            "cloud_price_per_call",
        ),
        ({"cloud_price_per_1k_tokens": 0.003, "price": 1}, "price"),
    ],
    ids=[
        "negative",
        "negative-call",
        "huge",
        "huge-call",
        "string",
        "bool",
        "list",
        "null-ok",
        "unknown",
    ],
)
def test_cloud_price__bad_value__400_names_field_nothing_changed(
    client_as: Callable[[Any], APIClient],
    fleet: Any,
    publisher: Any,
    body: dict[str, Any],
    field: str,
) -> None:
    # When a publisher sends a bad price
    response = client_as(publisher).patch(URL, body, format="json")

    # Then 400 names the field and nothing changed
    assert response.status_code == 400, response.content
    assert [d["field"] for d in response.json()["error"]["details"]] == [field]
    assert _price() == (0.002, 0.0)
    assert not AuditEntry.objects.filter(action="fleet.cloud_price").exists()


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_cloud_price__hostile_json__400_names_field_nothing_changed(
    client_as: Callable[[Any], APIClient], fleet: Any, publisher: Any, hostile: Hostile
) -> None:
    # When the price is NaN, Infinity, 1e999, nested 1,000 deep, NUL-bearing, ...
    response = client_as(publisher).generic(
        "PATCH",
        URL,
        with_field({}, "cloud_price_per_1k_tokens", hostile.raw),
        content_type="application/json",
    )

    # Then 400 names the field, nothing changed
    assert response.status_code == 400, response.content
    assert_names(response.json()["error"], "cloud_price_per_1k_tokens", hostile)
    assert _price() == (0.002, 0.0)


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_cloud_price__not_publisher__403_nothing_changed(
    client_as: Callable[[Any], APIClient], fleet: Any, request: pytest.FixtureRequest, role: str
) -> None:
    # When a viewer or an editor tries to set the price
    user = request.getfixturevalue(role)
    response = client_as(user).patch(URL, {"cloud_price_per_call": 0.5}, format="json")

    # Then 403, nothing changed
    assert response.status_code == 403
    assert _price() == (0.002, 0.0)


def test_cloud_price__anonymous_or_unknown_fleet__refused(
    api_client: APIClient, client_as: Callable[[Any], APIClient], fleet: Any, publisher: Any
) -> None:
    assert api_client.patch(URL, {"cloud_price_per_call": 0.5}, format="json").status_code in (
        401,
        403,
    )
    missing = client_as(publisher).patch(
        "/api/v1/fleets/nope/", {"cloud_price_per_call": 0.5}, format="json"
    )
    assert missing.status_code == 404
    assert _price() == (0.002, 0.0)


def test_cloud_price__oversized_body__413(
    client_as: Callable[[Any], APIClient], fleet: Any, publisher: Any
) -> None:
    body = '{"cloud_price_per_call": 0.5, "pad": "' + "x" * 3_000_000 + '"}'
    response = client_as(publisher).generic("PATCH", URL, body, content_type="application/json")
    assert response.status_code == 413
    assert _price() == (0.002, 0.0)


def test_cloud_price__same_price_sent_twice__one_audit_entry(
    client_as: Callable[[Any], APIClient], fleet: Any, publisher: Any
) -> None:
    # When the same price is sent twice (a retried request)
    client = client_as(publisher)
    for _ in range(2):
        response = client.patch(URL, {"cloud_price_per_call": 0.25}, format="json")
        assert response.status_code == 200

    # Then it is stored once, audited once
    assert _price() == (0.002, 0.25)
    assert AuditEntry.objects.filter(action="fleet.cloud_price").count() == 1
