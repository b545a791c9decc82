"""The lab page: who may open it, what it shows first, and the cloud price form."""

from typing import Any

import pytest
from django.test import Client

from routing_policies.models import AuditEntry, Fleet

pytestmark = pytest.mark.django_db

PAGE = "/fleets/fleet-a/lab/"
PRICE = "/fleets/fleet-a/lab/cloud-price/"


def _as(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


def test_lab_page__viewer__first_answer_painted(client: Client, fleet: Fleet, viewer: Any) -> None:
    # When a viewer opens the lab
    response = _as(client, viewer).get(PAGE)

    # Then the seed's second task in text/interactive/normal is answered: device, step 6
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-field="route">device<' in page
    assert "Step 6, score below θ" in page
    assert 'id="lab-first"' in page
    assert 'name="cloud_price_per_call"' not in page  # a viewer reads the price, no form


def test_lab_page__anonymous_or_no_role__refused(
    client: Client, fleet: Fleet, make_user: Any
) -> None:
    assert client.get(PAGE).status_code == 302
    assert _as(client, make_user()).get(PAGE).status_code == 403


@pytest.mark.parametrize("version", ["9", "draft", "v1", "1e3"])
def test_lab_page__unknown_version__404(
    client: Client, fleet: Fleet, viewer: Any, version: str
) -> None:
    assert _as(client, viewer).get(PAGE, {"version": version}).status_code == 404


def test_lab_page__cloud_price_form__publisher_saves(
    client: Client, fleet: Fleet, publisher: Any
) -> None:
    # When a publisher saves a new price on the lab page
    response = _as(client, publisher).post(
        PRICE, {"cloud_price_per_1k_tokens": "0.004", "cloud_price_per_call": "0.0005"}
    )

    # Then it is stored and audited, and the page shows it
    assert response.status_code == 302
    fleet.refresh_from_db()
    assert (fleet.cloud_price_per_1k_tokens, fleet.cloud_price_per_call) == (0.004, 0.0005)
    assert AuditEntry.objects.filter(action="fleet.cloud_price").count() == 1
    assert 'value="0.004"' in client.get(PAGE).content.decode()


@pytest.mark.parametrize(
    ("posted", "says"),
    [
        (
            {"cloud_price_per_1k_tokens": "-1"},
            "Per 1,000 tokens: Ensure this value is greater than or equal to 0.",
        ),
        ({"cloud_price_per_call": "nan"}, "Per call: A valid number is required."),
        ({"cloud_price_per_call": "1e400"}, "Per call: A valid number is required."),
        ({"cloud_price_per_call": "lots"}, "Per call: A valid number is required."),
        ({"cloud_price_per_call": "5000"}, "Per call: Ensure this value is less than or equal"),
    ],
)
def test_lab_page__cloud_price_form_bad_value__400_says_why_nothing_saved(
    client: Client, fleet: Fleet, publisher: Any, posted: dict[str, str], says: str
) -> None:
    response = _as(client, publisher).post(PRICE, posted)
    assert response.status_code == 400
    assert says in response.content.decode()
    fleet.refresh_from_db()
    assert (fleet.cloud_price_per_1k_tokens, fleet.cloud_price_per_call) == (0.002, 0.0)


def test_lab_page__cloud_price_form__editor_403(client: Client, fleet: Fleet, editor: Any) -> None:
    response = _as(client, editor).post(PRICE, {"cloud_price_per_call": "1"})
    assert response.status_code == 403
    fleet.refresh_from_db()
    assert fleet.cloud_price_per_call == 0.0
