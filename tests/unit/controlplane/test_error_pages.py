"""The product's own 404 and 500 pages (DEBUG off, as in `make run` and production)."""

from typing import Any, NoReturn

import pytest
from django.http import HttpRequest
from django.test import Client
from django.urls import include, path

pytestmark = pytest.mark.django_db


def _broken_view(request: HttpRequest) -> NoReturn:
    raise RuntimeError("a bug in a view")


# The project's routes plus one that fails, so the 500 page is the one a real bug shows.
urlpatterns = [path("broken/", _broken_view), path("", include("controlplane.urls"))]


def test_unknown_address__debug_off__product_404_page_not_the_url_list(client: Client) -> None:
    # Given DEBUG off (the suite, `make run` and production all run that way)
    # When a browser opens an address nothing serves
    response = client.get("/no/such/page/")

    # Then it gets the product's page, in its look, and not Django's list of URL patterns
    assert response.status_code == 404
    page = response.content.decode()
    assert "<h1>Not found</h1>" in page
    assert "There is nothing at /no/such/page/." in page
    assert "/static/css/app.css" in page
    assert "Back to the fleets" in page
    assert "URLconf" not in page
    assert "api/v1/" not in page


def test_server_error__debug_off__product_500_page_without_details(settings: Any) -> None:
    # Given a view with a bug, DEBUG off
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)

    # When a browser opens it
    response = client.get("/broken/")

    # Then it gets the product's 500 page, in its look, and nothing of the error itself
    assert response.status_code == 500
    page = response.content.decode()
    assert "<h1>Something went wrong on our side</h1>" in page
    assert "/static/css/app.css" in page
    assert "Back to the fleets" in page
    assert "a bug in a view" not in page
    assert "Traceback" not in page
