"""The OpenAPI schema lists every API route, and the docs page is served without any CDN."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver
from drf_spectacular.validation import validate_schema

from edge_sdk.wire import PROTOBUF_MEDIA_TYPE, codec
from routing_policies.services import device_enroll, fleet_switch_version
from routing_policies.urls import urlpatterns as api_urlpatterns

pytestmark = pytest.mark.django_db

ASSET_URL_RE = re.compile(
    r"""<(?:script|link|img)\b[^>]*\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.IGNORECASE
)


@pytest.fixture
def api_client(client_as: Callable[[Any], Any], make_user: Callable[..., Any]) -> Any:
    """Logged in: the schema is read by logged-in users and API tokens (API_DOCS_ACCESS;
    tests/unit/controlplane/test_api_docs_access.py)."""
    return client_as(make_user(None))


def _openapi_path(pattern: URLPattern | URLResolver) -> str:
    """`fleets/<slug:slug>/` as OpenAPI writes it: `/api/v1/fleets/{slug}/`."""
    route = str(pattern.pattern)
    return "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def test_schema__get__valid_openapi_listing_every_api_route(api_client: Any) -> None:
    # Given the API's URL routes
    expected = {_openapi_path(p) for p in api_urlpatterns}

    # When the schema is fetched by a logged-in user
    response = api_client.get("/api/schema/?format=json")

    # Then it is a valid OpenAPI 3 document listing every /api/v1/ route
    assert response.status_code == 200
    schema = response.json()
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    assert expected <= set(schema["paths"])
    assert len(expected) == len(api_urlpatterns)


def test_docs__logged_in_user__html_with_every_asset_served_locally(
    client: Client, make_user: Callable[..., Any]
) -> None:
    # Given a logged-in user
    client.force_login(make_user(None))

    # When they open the API docs
    response = client.get("/api/docs/")

    # Then the Swagger UI page comes back, and every script and stylesheet it loads is ours
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assets = ASSET_URL_RE.findall(html)
    assert any("swagger-ui" in url for url in assets), assets
    external = [url for url in assets if re.match(r"(?i)(https?:)?//", url)]
    assert external == []
    assert "cdn.jsdelivr.net" not in html
    assert "unpkg.com" not in html


def test_docs__swagger_assets__served_by_the_app(
    client: Client, make_user: Callable[..., Any]
) -> None:
    # Given the docs page a logged-in user sees
    client.force_login(make_user(None))
    html = client.get("/api/docs/").content.decode()
    scripts = [url for url in ASSET_URL_RE.findall(html) if url.endswith(".js")]

    # When each script it names is fetched from this server
    statuses = {url: client.get(url).status_code for url in scripts}

    # Then each one is there
    assert scripts
    assert set(statuses.values()) == {200}, statuses


def _request_properties(schema: dict[str, Any], path: str, method: str) -> set[str]:
    body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    component = body["$ref"].rsplit("/", 1)[-1]
    return set(schema["components"]["schemas"][component]["properties"])


def test_schema__request_bodies__each_endpoint_documents_its_own_fields(api_client: Any) -> None:
    # Given the schema a script author generates a client from
    schema = api_client.get("/api/schema/?format=json").json()

    # When the request bodies of fleet create, dimension add and publish are read
    fleet_create = _request_properties(schema, "/api/v1/fleets/", "post")
    dimension_add = _request_properties(schema, "/api/v1/fleets/{slug}/draft/dimensions/", "post")
    publish = _request_properties(schema, "/api/v1/fleets/{slug}/draft/publish/", "post")

    # Then each describes its own fields (not one endpoint's body reused for the others)
    assert {"slug", "name"} <= fleet_create
    assert {"dimension", "value", "copy_from"} <= dimension_add
    assert {"note", "revision"} <= publish


def test_schema__dimension_routes__only_the_methods_they_serve(api_client: Any) -> None:
    # Given the schema
    paths = api_client.get("/api/schema/?format=json").json()["paths"]

    # When the two dimension routes are read
    collection = paths["/api/v1/fleets/{slug}/draft/dimensions/"]
    value = paths["/api/v1/fleets/{slug}/draft/dimensions/{dimension}/{value}/"]

    # Then a value is added on the collection and removed on its own route, nothing else
    assert set(collection) - {"parameters"} == {"post"}
    assert set(value) - {"parameters"} == {"delete"}


def test_schema__operation_ids__unique_without_numbered_suffixes(api_client: Any) -> None:
    # Given the schema (generated clients name their methods after operationIds)
    paths = api_client.get("/api/schema/?format=json").json()["paths"]

    # When every operation's id is collected
    ids = [
        operation["operationId"]
        for path_item in paths.values()
        for method, operation in path_item.items()
        if method != "parameters"
    ]

    # Then each is unique and none was renamed `…_2` to break a collision
    assert len(ids) == len(set(ids))
    assert [i for i in ids if re.search(r"_\d+$", i)] == []


def test_schema__protobuf_answers_and_body__listed_and_served_as_listed(
    api_client: Any,
    fleet: Any,
    fleet_key: str,
    publisher: Any,
    publish_version: Callable[..., Any],
) -> None:
    # Given a fleet with v1 and v2 published, v2 its stable, an enrolled device, the schema
    publish_version(fleet, threshold=0.8)
    fleet_switch_version(actor=publisher, fleet=fleet, version=2)
    _, token = device_enroll(fleet_key=fleet_key, device_id="schema-pb", platform="android")
    schema = api_client.get("/api/schema/?format=json").json()
    documents = "/api/v1/fleets/{slug}/documents/{number}"
    policy = "/api/v1/devices/me/policy"

    # Then the document, the ?since= delta and the 226 delta list protobuf beside JSON, and so
    # does the telemetry body
    for path, status in ((documents, "200"), (policy, "200"), (policy, "226")):
        content = schema["paths"][path]["get"]["responses"][status]["content"]
        assert set(content) == {"application/json", PROTOBUF_MEDIA_TYPE}, (path, status)
        assert content[PROTOBUF_MEDIA_TYPE]["schema"] == {"type": "string", "format": "binary"}
    body = schema["paths"]["/api/v1/telemetry"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", PROTOBUF_MEDIA_TYPE}

    # and each answer listed as protobuf is one when asked for: the document, the delta
    # (`?since=1`, `A-IM`) and the poll, each the message it says
    asked = {"HTTP_ACCEPT": PROTOBUF_MEDIA_TYPE}
    client = Client()
    whole = client.get(f"/api/v1/fleets/{fleet.slug}/documents/2", **asked)
    since = client.get(f"/api/v1/fleets/{fleet.slug}/documents/2?since=1", **asked)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    polled = client.get(policy, **asked, **auth)
    v1_etag = client.get(f"/api/v1/fleets/{fleet.slug}/documents/1")["ETag"]
    delta = client.get(
        policy, HTTP_A_IM="policy-delta", HTTP_IF_NONE_MATCH=v1_etag, **asked, **auth
    )
    for answer in (whole, since, polled, delta):
        assert answer["Content-Type"] == PROTOBUF_MEDIA_TYPE
    assert codec.document_from_protobuf(whole.content)["version"] == 2
    assert codec.delta_from_protobuf(since.content)["base"] == 1
    assert codec.document_from_protobuf(polled.content)["version"] == 2
    assert delta.status_code == 226
    assert codec.delta_from_protobuf(delta.content)["base"] == 1
