"""Who reads the OpenAPI schema and the Swagger UI (API_DOCS_ACCESS, docs/operations.md)."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_schema__anonymous__401_without_the_schema(api_client: APIClient) -> None:
    # Given the default access (logged-in users and API tokens)
    # When someone neither logged in nor holding a token asks for the schema
    response = api_client.get("/api/schema/?format=json")

    # Then it is refused with the API's error body, and no route is revealed
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["error"]["code"] == "not_authenticated"
    assert "/api/v1/" not in response.content.decode()


def test_schema__api_token__openapi_document(
    api_client: APIClient, make_user: Callable[..., Any]
) -> None:
    # Given a script's API token (as generated clients and the schemathesis test fetch it)
    token = Token.objects.create(user=make_user(None))

    # When it asks for the schema with `Authorization: Token …`
    response = api_client.get("/api/schema/?format=json", HTTP_AUTHORIZATION=f"Token {token.key}")

    # Then the OpenAPI document comes back
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def test_schema__logged_in_without_a_role__openapi_document(
    client: Client, make_user: Callable[..., Any]
) -> None:
    # Given a logged-in user, whatever their role (Swagger UI fetches with the session)
    client.force_login(make_user(None))

    # When the schema is fetched
    response = client.get("/api/schema/?format=json")

    # Then it comes back
    assert response.status_code == 200
    assert "/api/v1/fleets/" in response.json()["paths"]


def test_docs__anonymous_browser__sent_to_login_and_back(client: Client) -> None:
    # Given a browser that is not logged in
    # When it opens the API docs
    response = client.get("/api/docs/")

    # Then it is sent to the login page, which returns it to the docs afterwards
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/api/docs/"


def test_docs__public_access__anyone_reads_schema_and_docs(
    settings: Any, api_client: APIClient, client: Client
) -> None:
    # Given a deployment that opens the docs to everyone (API_DOCS_ACCESS=public)
    settings.API_DOCS_ACCESS = "public"

    # When someone not logged in asks for the schema and the docs page
    schema = api_client.get("/api/schema/?format=json")
    docs = client.get("/api/docs/")

    # Then both are served
    assert schema.status_code == 200
    assert docs.status_code == 200
    assert docs["Content-Type"].startswith("text/html")
