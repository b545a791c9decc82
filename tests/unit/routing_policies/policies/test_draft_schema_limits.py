"""The OpenAPI schema of the draft's write bodies says what the server does (issue 22): `cells`
needs one item at least, a cell edit one field at least, and an imported document's
`dimensions` takes no other key. Each test reads the generated schema at /api/schema/ and sends
the body it refuses: the server refuses it too, naming the field, and stores nothing. (Since
issue 23 the serializer the schema shows is the one that refuses: these tests keep the
refusals a client sees, not two copies in step.)"""

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document
from routing_policies.models import AuditEntry, PolicyVersion
from routing_policies.services import policy_draft_create

pytestmark = pytest.mark.django_db

FLEET = "/api/v1/fleets/fleet-a"
Client = Callable[[Any], APIClient]


def _components(client: APIClient) -> dict[str, Any]:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    components: dict[str, Any] = response.json()["components"]["schemas"]
    return components


def _request_body(client: APIClient, path: str, method: str) -> dict[str, Any]:
    """The request component of an operation, resolved from its $ref."""
    schema = client.get("/api/schema/?format=json").json()
    content = schema["paths"][path][method]["requestBody"]["content"]["application/json"]
    name = content["schema"]["$ref"].rsplit("/", 1)[1]
    body: dict[str, Any] = schema["components"]["schemas"][name]
    return body


def _stored(fleet: Any) -> tuple[int, int, int]:
    draft = PolicyVersion.objects.get(fleet=fleet, published_at__isnull=True)
    return draft.revision, draft.cells.count(), AuditEntry.objects.count()


def _document() -> dict[str, Any]:
    return build_document(
        fleet_slug="fleet-a",
        number=None,
        published_at=None,
        dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )


def _fields(response: Any) -> list[str]:
    assert response.status_code == 400, response.content
    return [d["field"] for d in response.json()["error"]["details"]]


def test_draft_cells_schema__cells_empty__schema_and_server_refuse(
    fleet: Any, editor: Any, client_as: Client
) -> None:
    # Given a draft, and the schema of PATCH …/draft/cells/
    policy_draft_create(actor=editor, fleet=fleet)
    client = client_as(editor)
    body = _request_body(client, "/api/v1/fleets/{slug}/draft/cells/", "patch")
    assert body["properties"]["cells"]["minItems"] == 1
    before = _stored(fleet)

    # When an edit names no cell
    response = client.patch(f"{FLEET}/draft/cells/", {"revision": 1, "cells": []}, format="json")

    # Then 400 names cells, and the draft is as it was
    assert _fields(response) == ["cells"]
    assert _stored(fleet) == before


def test_draft_cells_schema__values_empty__schema_and_server_refuse(
    fleet: Any, editor: Any, client_as: Client
) -> None:
    # Given a draft, and the schema of one cell's values
    policy_draft_create(actor=editor, fleet=fleet)
    client = client_as(editor)
    assert _components(client)["PolicyCellValuesRequest"]["minProperties"] == 1
    before = _stored(fleet)

    # When a cell edit names no field
    cell = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}
    response = client.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [{**cell, "values": {}}]},
        format="json",
    )

    # Then 400 names values, and the draft is as it was
    assert _fields(response) == ["values"]
    assert _stored(fleet) == before


def test_draft_import_schema__cells_empty__schema_and_server_refuse(
    fleet: Any, editor: Any, client_as: Client
) -> None:
    # Given a draft, and the schema of PUT …/draft/document
    policy_draft_create(actor=editor, fleet=fleet)
    client = client_as(editor)
    body = _request_body(client, "/api/v1/fleets/{slug}/draft/document", "put")
    assert body["properties"]["cells"]["minItems"] == 1
    before = _stored(fleet)

    # When a document with no cells is imported
    response = client.put(
        f"{FLEET}/draft/document", {**_document(), "cells": [], "revision": 1}, format="json"
    )

    # Then 400 names cells, and the draft is as it was
    assert "cells" in _fields(response)
    assert _stored(fleet) == before


def test_draft_import_schema__extra_dimension__schema_and_server_refuse(
    fleet: Any, editor: Any, client_as: Client
) -> None:
    # Given a draft, and the schema of an imported document's dimensions
    policy_draft_create(actor=editor, fleet=fleet)
    client = client_as(editor)
    body = _request_body(client, "/api/v1/fleets/{slug}/draft/document", "put")
    name = body["properties"]["dimensions"]["$ref"].rsplit("/", 1)[1]
    dimensions = _components(client)[name]
    assert dimensions["additionalProperties"] is False
    assert set(dimensions["properties"]) == set(SEED_DIMENSIONS)
    before = _stored(fleet)

    # When the document's dimensions carry a fourth one
    document = _document()
    document["dimensions"] = {**document["dimensions"], "region": ["eu"]}
    response = client.put(f"{FLEET}/draft/document", {**document, "revision": 1}, format="json")

    # Then 400 names the unknown dimension, and the draft is as it was
    assert any("region" in field for field in _fields(response)), response.content
    assert _stored(fleet) == before


def test_policy_document_schema__answer_dimensions__still_open_to_read(
    editor: Any, client_as: Client
) -> None:
    # Given the schema / Then only the request body is closed: the answer's shape is unchanged
    components = _components(client_as(editor))
    assert "additionalProperties" not in components["PolicyDimensions"]
