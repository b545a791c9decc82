"""The REST API under /api/v1/: roles, revisions, malformed input, duplicates, documents, diffs."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.test import APIClient

from controlplane.roles import Role
from routing_policies.cell_schema import SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document
from routing_policies.models import AuditEntry, Fleet, PolicyVersion
from routing_policies.selectors import version_get, version_table
from routing_policies.services import (
    policy_draft_create,
    policy_draft_import,
    policy_draft_update_cells,
    policy_version_publish,
)
from tests.factories import PASSWORD, draft_changed, make_fleet
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

FLEET = "/api/v1/fleets/fleet-a"
VOICE_NORMAL = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}

# Pinned query counts of the list endpoints (role lookup + one query per list, whatever N is).
FLEET_LIST_QUERIES = 2  # user's groups, fleets with their latest number and draft revision
VERSION_LIST_QUERIES = 3  # user's groups, the fleet, versions with their people and sources
AUDIT_LIST_QUERIES = {
    f"{FLEET}/audit/": 3,  # user's groups, the fleet, entries with their fleet
    "/api/v1/audit/": 2,  # user's groups, entries with their fleet
}


def _demo_document(**extra: Any) -> dict[str, Any]:
    document = build_document(
        fleet_slug="fleet-a",
        number=None,
        published_at=None,
        dimensions={k: list(v) for k, v in SEED_DIMENSIONS.items()},
        table=demo_table(),
    )
    return {**document, **extra}


def _cell_edit(key: dict[str, str] = VOICE_NORMAL, **values: Any) -> dict[str, Any]:
    return {**key, "values": values}


@dataclass(frozen=True)
class Write:
    """One write endpoint, with a body that succeeds on a fresh fleet-a (v1, draft at r1)."""

    name: str
    method: str
    path: str
    body: Callable[[], Any]
    least_role: Role
    success: int
    needs_draft: bool = True
    takes_revision: bool = True


WRITES = [
    Write(
        "fleet-create",
        "post",
        "/api/v1/fleets/",
        lambda: {"slug": "fleet-b", "name": "Fleet B"},
        Role.PUBLISHER,
        201,
        needs_draft=False,
        takes_revision=False,
    ),
    Write(
        "draft-create",
        "post",
        f"{FLEET}/draft/",
        lambda: {},
        Role.EDITOR,
        201,
        needs_draft=False,
        takes_revision=False,
    ),
    Write("draft-discard", "delete", f"{FLEET}/draft/", lambda: {"revision": 1}, Role.EDITOR, 204),
    Write(
        "cells-edit",
        "patch",
        f"{FLEET}/draft/cells/",
        lambda: {"revision": 1, "cells": [_cell_edit(threshold=0.7)]},
        Role.EDITOR,
        200,
    ),
    Write(
        "dimension-add",
        "post",
        f"{FLEET}/draft/dimensions/",
        lambda: {"revision": 1, "dimension": "task_type", "value": "code"},
        Role.EDITOR,
        201,
    ),
    Write(
        "dimension-remove",
        "delete",
        f"{FLEET}/draft/dimensions/task_type/image/",
        lambda: {"revision": 1},
        Role.EDITOR,
        200,
    ),
    Write(
        "import",
        "put",
        f"{FLEET}/draft/document",
        lambda: _demo_document(revision=1),
        Role.EDITOR,
        200,
    ),
    Write(
        "publish",
        "post",
        f"{FLEET}/draft/publish/",
        lambda: {"revision": 1, "note": "ship it"},
        Role.PUBLISHER,
        201,
    ),
]
WRITE_PARAMS = [pytest.param(w, id=w.name) for w in WRITES]
# The audit entry each write leaves (what a successful write must have stored).
AUDIT_ACTIONS = {
    "fleet-create": "fleet.created",
    "draft-create": "policy_draft.created",
    "draft-discard": "policy_draft.discarded",
    "cells-edit": "policy_cells.updated",
    "dimension-add": "policy_dimension.value_added",
    "dimension-remove": "policy_dimension.value_removed",
    "import": "policy_draft.imported",
    "publish": "policy_version.published",
}
DRAFT_WRITE_PARAMS = [pytest.param(w, id=w.name) for w in WRITES if w.takes_revision]
READS = [
    "/api/v1/fleets/",
    f"{FLEET}/",
    f"{FLEET}/versions/",
    f"{FLEET}/versions/1/",
    f"{FLEET}/versions/latest/",
    f"{FLEET}/versions/draft/",
    f"{FLEET}/versions/1/document",
    f"{FLEET}/versions/draft/document",
    f"{FLEET}/draft/",
    f"{FLEET}/diff/?a=1&b=draft",
    f"{FLEET}/audit/",
    "/api/v1/audit/",
]


def _send(client: APIClient, write: Write, body: Any = None, **extra: Any) -> Response:
    payload = write.body() if body is None else body
    method = getattr(client, write.method)
    return method(write.path, payload, format="json", **extra)


def _send_raw(client: APIClient, write: Write, raw: str, **extra: Any) -> Response:
    return client.generic(
        write.method.upper(), write.path, raw, content_type="application/json", **extra
    )


def assert_error(response: Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is an error of that status in the one JSON shape; returns its `error`."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], list)
    if code is not None:
        assert error["code"] == code
    return error


def _where(error: dict[str, Any]) -> set[tuple[str | None, str]]:
    return {(d.get("cell"), d["field"]) for d in error["details"]}


@pytest.fixture
def draft(fleet: Any, editor: Any) -> PolicyVersion:
    """fleet-a's draft (copied from v1) at revision 1."""
    return policy_draft_create(actor=editor, fleet=fleet)


@pytest.fixture
def state_for(fleet: Any, editor: Any) -> Callable[[Write], None]:
    """Prepare fleet-a for one write: a draft at revision 1 unless the write makes one."""

    def _prepare(write: Write) -> None:
        if write.name == "publish":
            # A draft at revision 1 that differs from v1 (an identical one is not published):
            # imported as a new draft, as a script would.
            document = _demo_document()
            for cell in document["cells"]:
                if {k: cell[k] for k in VOICE_NORMAL} == VOICE_NORMAL:
                    cell["threshold"] = 0.7
            policy_draft_import(actor=editor, fleet=fleet, document=document)
        elif write.needs_draft:
            policy_draft_create(actor=editor, fleet=fleet)

    return _prepare


def _stored_state() -> tuple[int, list[tuple[int | None, int]], int]:
    """What a refused request must leave alone: fleets, versions with revisions, audit log."""
    versions = list(PolicyVersion.objects.order_by("pk").values_list("number", "revision"))
    return Fleet.objects.count(), versions, AuditEntry.objects.count()


def _assert_stored(write: Write, before: tuple[Any, ...], actor: str) -> None:
    """A write that succeeded changed what is stored and is the newest audit entry, by `actor`."""
    assert _stored_state() != before
    newest = AuditEntry.objects.first()
    assert newest is not None
    assert (newest.action, newest.actor_name) == (AUDIT_ACTIONS[write.name], actor)


# --- roles ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", path) for path in READS] + [(w.method, w.path) for w in WRITES],
)
def test_api__anonymous__401_with_error_shape(
    api_client: APIClient, draft: PolicyVersion, method: str, path: str
) -> None:
    # Given nobody logged in
    # When any endpoint is called
    response = getattr(api_client, method)(path, {"revision": 1}, format="json")

    # Then 401 says authentication is needed, in the one error shape
    assert_error(response, 401, "not_authenticated")
    assert response.headers["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("path", READS)
def test_api__viewer__every_read__200(
    client_as: Callable[[Any], APIClient], viewer: Any, draft: PolicyVersion, path: str
) -> None:
    # Given a viewer and a fleet with v1 and a draft
    # When they read any endpoint
    response = client_as(viewer).get(path)

    # Then they get it
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("path", READS)
def test_api__user_without_role__read__403(
    client_as: Callable[[Any], APIClient], make_user: Any, draft: PolicyVersion, path: str
) -> None:
    # Given a logged-in user in no role group
    nobody = make_user(None)

    # When they read an endpoint
    response = client_as(nobody).get(path)

    # Then they are refused
    assert_error(response, 403, "permission_denied")


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__viewer__every_write__403_and_nothing_stored(
    client_as: Callable[[Any], APIClient], viewer: Any, state_for: Any, write: Write
) -> None:
    # Given a viewer and a fleet ready for the write
    state_for(write)
    before = _stored_state()

    # When they try it
    response = _send(client_as(viewer), write)

    # Then 403 names the role needed, and nothing changed
    error = assert_error(response, 403, "permission_denied")
    assert "role" in error["message"]
    assert _stored_state() == before


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__editor__write__allowed_except_publish_and_fleet_create(
    client_as: Callable[[Any], APIClient], editor: Any, state_for: Any, write: Write
) -> None:
    # Given an editor and a fleet ready for the write
    state_for(write)
    before = _stored_state()

    # When they do it
    response = _send(client_as(editor), write)

    # Then draft work succeeds (and is stored); publishing and creating fleets are refused with
    # nothing changed
    if write.least_role <= Role.EDITOR:
        assert response.status_code == write.success, response.content
        _assert_stored(write, before, "editor")
    else:
        assert_error(response, 403, "permission_denied")
        assert _stored_state() == before


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__publisher__every_write__allowed(
    client_as: Callable[[Any], APIClient], publisher: Any, state_for: Any, write: Write
) -> None:
    # Given a publisher and a fleet ready for the write
    state_for(write)
    before = _stored_state()

    # When they do it
    response = _send(client_as(publisher), write)

    # Then it succeeds
    assert response.status_code == write.success, response.content
    # and is stored, audited as theirs
    _assert_stored(write, before, "publisher")


def test_api__token_header__script_reads_and_edits(
    api_client: APIClient, editor: Any, draft: PolicyVersion
) -> None:
    # Given a script holding the editor's API token
    token = Token.objects.create(user=editor)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    # When it reads the draft and edits a cell with the draft's ETag
    etag = api_client.get(f"{FLEET}/draft/").headers["ETag"]
    response = api_client.patch(
        f"{FLEET}/draft/cells/",
        {"cells": [_cell_edit(threshold=0.7)]},
        format="json",
        HTTP_IF_MATCH=etag,
    )

    # Then the edit is saved under the editor's name
    assert response.status_code == 200, response.content
    assert version_table(version=draft)[("voice", "interactive", "normal")]["threshold"] == 0.7
    assert AuditEntry.objects.filter(action="policy_cells.updated").get().actor_name == "editor"


def test_api__bad_token__401(api_client: APIClient, draft: PolicyVersion) -> None:
    # Given a script with a token that does not exist
    api_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    # When it reads
    response = api_client.get(f"{FLEET}/draft/")

    # Then 401
    assert_error(response, 401, "authentication_failed")


def test_api__browser_session_without_csrf_token__write_refused(
    editor: Any, draft: PolicyVersion
) -> None:
    # Given a browser session of an editor (cookies), sending no CSRF token
    browser = APIClient(enforce_csrf_checks=True)
    browser.login(username="editor", password=PASSWORD)

    # When a page's script edits the draft
    response = browser.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [_cell_edit(threshold=0.7)]},
        format="json",
    )

    # Then it is refused (a cross-site form cannot edit policies), but reads work
    assert_error(response, 403)
    assert "CSRF" in response.json()["error"]["message"]
    assert browser.get(f"{FLEET}/draft/").status_code == 200
    draft.refresh_from_db()
    assert draft.revision == 1


# --- revisions -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["if-match", "body"])
def test_draft_cells_api__revision_as_if_match_or_body__saved_and_new_etag(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion, how: str
) -> None:
    # Given a draft at revision 1
    body: dict[str, Any] = {"cells": [_cell_edit(threshold=0.7)]}
    extra = {"HTTP_IF_MATCH": '"r1"'} if how == "if-match" else {}
    if how == "body":
        body["revision"] = 1

    # When a cell is edited naming revision 1 either way
    response = client_as(editor).patch(f"{FLEET}/draft/cells/", body, format="json", **extra)

    # Then it is saved and the answer carries revision 2 as body field and ETag
    assert response.status_code == 200, response.content
    assert response.json()["revision"] == 2
    assert response.headers["ETag"] == '"r2"'
    assert version_table(version=draft)[("voice", "interactive", "normal")]["threshold"] == 0.7


def test_draft_cells_api__nested_values__saved(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When weights are sent nested, as in the policy document
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {
            "revision": 1,
            "cells": [_cell_edit(weights={"length": 0.5, "intent": 0.25, "lm": 0.25})],
        },
        format="json",
    )

    # Then they are saved and shown nested in the draft's document
    assert response.status_code == 200, response.content
    cell = response.json()["document"]["cells"][1]
    assert cell["weights"] == {"length": 0.5, "intent": 0.25, "lm": 0.25}


@pytest.mark.parametrize("write", DRAFT_WRITE_PARAMS)
def test_api__draft_write_without_revision__428(
    client_as: Callable[[Any], APIClient], publisher: Any, state_for: Any, write: Write
) -> None:
    # Given a draft at revision 1
    state_for(write)
    before = _stored_state()
    body = {k: v for k, v in write.body().items() if k != "revision"}

    # When a write names no revision (no If-Match, no `revision`)
    response = _send(client_as(publisher), write, body)

    # Then 428 asks for one, and nothing changed
    assert_error(response, 428, "revision_required")
    assert _stored_state() == before


@pytest.mark.parametrize("write", DRAFT_WRITE_PARAMS)
def test_api__draft_write_with_if_match__accepted(
    client_as: Callable[[Any], APIClient], publisher: Any, state_for: Any, write: Write
) -> None:
    # Given a draft at revision 1
    state_for(write)
    body = {k: v for k, v in write.body().items() if k != "revision"}
    before = _stored_state()

    # When the write names the revision in If-Match only
    response = _send(client_as(publisher), write, body, HTTP_IF_MATCH='"r1"')

    # Then it succeeds
    assert response.status_code == write.success, response.content
    # and is stored, audited as the publisher's
    _assert_stored(write, before, "publisher")


@pytest.mark.parametrize("write", DRAFT_WRITE_PARAMS)
def test_api__draft_write_with_stale_revision__409_says_changed_nothing_stored(
    client_as: Callable[[Any], APIClient],
    publisher: Any,
    editor: Any,
    fleet: Any,
    state_for: Any,
    write: Write,
) -> None:
    # Given a draft that someone else moved from revision 1 to 2
    state_for(write)
    policy_draft_update_cells(
        actor=editor, fleet=fleet, revision=1, edits=[_cell_edit(cache_ttl_s=60)]
    )
    before = _stored_state()

    # When a write is sent for revision 1
    response = _send(client_as(publisher), write)

    # Then 409 says the draft changed and gives the current revision; nothing else changed
    error = assert_error(response, 409, "stale_revision")
    assert "changed" in error["message"]
    assert error["details"][0]["current_revision"] == 2
    assert _stored_state() == before


def test_api__if_match_not_a_draft_etag__400_names_header(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When the If-Match header holds a published version's ETag
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {"cells": [_cell_edit(threshold=0.7)]},
        format="json",
        HTTP_IF_MATCH='"v1-0123456789abcdef"',
    )

    # Then 400 names the header
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {(None, "If-Match")}


# --- malformed and oversized bodies --------------------------------------------------------


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__malformed_json__400_and_nothing_stored(
    client_as: Callable[[Any], APIClient], publisher: Any, state_for: Any, write: Write
) -> None:
    # Given a fleet ready for the write
    state_for(write)
    before = _stored_state()

    # When the body is cut off mid-JSON
    response = _send_raw(client_as(publisher), write, '{"revision": 1, "cells": [')

    # Then 400 in the error shape, nothing changed
    assert_error(response, 400, "parse_error")
    assert _stored_state() == before


@pytest.mark.parametrize("raw", ["[]", '[{"revision": 1}]', '"text"', '""', "7", "null"])
@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__json_body_not_an_object__400_and_nothing_stored(
    client_as: Callable[[Any], APIClient],
    publisher: Any,
    state_for: Any,
    write: Write,
    raw: str,
) -> None:
    # Given a fleet ready for the write
    state_for(write)
    before = _stored_state()

    # When the body is valid JSON but not an object (the revision in If-Match is right)
    response = _send_raw(client_as(publisher), write, raw, HTTP_IF_MATCH='"r1"')

    # Then 400 says a JSON object is expected, nothing changed
    assert_error(response, 400)
    assert _stored_state() == before


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__body_over_limit__413_and_nothing_stored(
    client_as: Callable[[Any], APIClient], publisher: Any, state_for: Any, write: Write
) -> None:
    # Given a fleet ready for the write
    state_for(write)
    before = _stored_state()
    body = {**write.body(), "padding": "x" * settings.MAX_REQUEST_BYTES}

    # When the body is over MAX_REQUEST_BYTES (1 MiB)
    response = _send(client_as(publisher), write, body)

    # Then 413 in the error shape, naming the limit, and nothing changed
    error = assert_error(response, 413, "payload_too_large")
    assert str(settings.MAX_REQUEST_BYTES) in error["message"]
    assert _stored_state() == before


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_api__hostile_json_value__400_names_field_nothing_stored(
    client_as: Callable[[Any], APIClient],
    publisher: Any,
    state_for: Any,
    write: Write,
    hostile: Hostile,
) -> None:
    # Given a fleet ready for the write
    state_for(write)
    before = _stored_state()

    # When a good body carries one field nested 1,000 deep, with a NUL, a lone surrogate, NaN
    # or Infinity
    raw = with_field(write.body(), "extra", hostile.raw)
    response = _send_raw(client_as(publisher), write, raw)

    # Then 400 names the field (never a 500 or a parse error without details), nothing stored
    error = assert_error(response, 400, "validation_failed")
    assert_names(error, "extra", hostile)
    assert _stored_state() == before


def test_draft_cells_api__nul_in_a_cell_key__400_names_it_nothing_stored(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft / When a cell edit names its task type with a NUL in it
    response = client_as(editor).generic(
        "PATCH",
        f"{FLEET}/draft/cells/",
        '{"revision": 1, "cells": [{"task_type": "voice\\u0000", "latency_budget": '
        '"interactive", "privacy_tier": "normal", "values": {"threshold": 0.5}}]}',
        content_type="application/json",
    )

    # Then 400 names that field of that edit, and the draft is untouched
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {(None, "cells[0].task_type")}
    assert PolicyVersion.objects.get(pk=draft.pk).revision == 1


def test_draft_cells_api__overflowing_number__400_names_field_nothing_stored(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When θ is sent as 1e999 (valid JSON, read as infinity)
    response = client_as(editor).generic(
        "PATCH",
        f"{FLEET}/draft/cells/",
        '{"revision": 1, "cells": [{"task_type": "voice", "latency_budget": "interactive", '
        '"privacy_tier": "normal", "values": {"threshold": 1e999}}]}',
        content_type="application/json",
    )

    # Then 400 names the cell edit and field, and θ is not clamped to 1
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {(None, "cells[0].values.threshold")}
    assert version_table(version=draft)[("voice", "interactive", "normal")]["threshold"] == 0.65


def test_draft_cells_api__nan_literal__400_nothing_stored(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When θ is sent as the non-JSON literal NaN
    response = client_as(editor).generic(
        "PATCH",
        f"{FLEET}/draft/cells/",
        '{"revision": 1, "cells": [{"task_type": "voice", "latency_budget": "interactive", '
        '"privacy_tier": "normal", "values": {"threshold": NaN}}]}',
        content_type="application/json",
    )

    # Then the body is refused, and nothing is stored
    assert_error(response, 400)
    assert version_table(version=draft)[("voice", "interactive", "normal")]["threshold"] == 0.65


# --- not found -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", p.replace("fleet-a", "no-such-fleet")) for p in READS if "fleet-a" in p]
    + [(w.method, w.path.replace("fleet-a", "no-such-fleet")) for w in WRITES if w.takes_revision]
    + [("post", "/api/v1/fleets/no-such-fleet/draft/"), ("get", "/api/v1/audit/?fleet=nope")],
)
def test_api__unknown_fleet__404(
    client_as: Callable[[Any], APIClient],
    publisher: Any,
    draft: PolicyVersion,
    method: str,
    path: str,
) -> None:
    # Given fleet-a only
    # When another fleet is named
    client = client_as(publisher)
    if method == "get":
        response = client.get(path)
    else:
        response = getattr(client, method)(path, {"revision": 1}, format="json")

    # Then 404 in the error shape
    assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "path",
    [
        f"{FLEET}/versions/9/",
        f"{FLEET}/versions/one/",
        f"{FLEET}/versions/9/document",
        f"{FLEET}/versions/draft/",
        f"{FLEET}/draft/",
        f"{FLEET}/diff/?a=1&b=9",
    ],
)
def test_api__unknown_version__404(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any, path: str
) -> None:
    # Given fleet-a with v1 and no draft
    # When a version that does not exist is named
    response = client_as(viewer).get(path)

    # Then 404 in the error shape
    assert_error(response, 404, "not_found")


# --- duplicates ----------------------------------------------------------------------------


def test_fleet_list_api__create__201_with_a_fresh_draft(
    client_as: Callable[[Any], APIClient], publisher: Any
) -> None:
    # Given a publisher
    # When they create a fleet
    response = client_as(publisher).post(
        "/api/v1/fleets/", {"slug": "cars-eu", "name": "Cars (EU)"}, format="json"
    )

    # Then it exists with a 12-cell draft at revision 1 and nothing published yet
    assert response.status_code == 201, response.content
    assert response.json()["latest_version"] is None
    assert response.json()["draft_revision"] == 1
    fleet = Fleet.objects.get(slug="cars-eu")
    assert len(version_table(version=version_get(fleet=fleet, ref="draft"))) == 12


def test_fleet_list_api__slug_twice__409(
    client_as: Callable[[Any], APIClient], publisher: Any, fleet: Any
) -> None:
    # Given fleet-a
    # When fleet-a is created again
    response = client_as(publisher).post(
        "/api/v1/fleets/", {"slug": "fleet-a", "name": "Again"}, format="json"
    )

    # Then 409, and the first fleet is unchanged
    assert_error(response, 409, "duplicate")
    assert Fleet.objects.get(slug="fleet-a").name == "Fleet-A"


def test_fleet_list_api__slug_not_a_slug__400_names_slug(
    client_as: Callable[[Any], APIClient], publisher: Any
) -> None:
    # Given a publisher
    # When a fleet slug holds spaces
    response = client_as(publisher).post(
        "/api/v1/fleets/", {"slug": "my fleet", "name": "Mine"}, format="json"
    )

    # Then 400 names the field
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {(None, "slug")}
    assert not Fleet.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "\x1e"),
        ("name", " Cars"),
        ("name", "Cars\n"),
        ("slug", "cars\n"),
        ("slug", " cars"),
    ],
)
def test_fleet_list_api__untidy_name_or_slug__400_names_it_nothing_trimmed(
    client_as: Callable[[Any], APIClient], publisher: Any, field: str, value: str
) -> None:
    # Given a publisher
    # When a fleet's name or slug starts or ends with whitespace, or is only a separator
    # character (Python's strip() takes "\x1e" away, which would leave a blank name)
    body = {"slug": "cars-eu", "name": "Cars (EU)", field: value}
    response = client_as(publisher).post("/api/v1/fleets/", body, format="json")

    # Then 400 names the field, and no fleet exists under a trimmed spelling
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {(None, field)}
    assert not Fleet.objects.exists()


def test_fleet_list_api__description__kept_as_sent(
    client_as: Callable[[Any], APIClient], publisher: Any
) -> None:
    # Given a publisher
    # When a fleet's description ends with a newline
    response = client_as(publisher).post(
        "/api/v1/fleets/",
        {"slug": "cars-eu", "name": "Cars (EU)", "description": "EU cars.\n"},
        format="json",
    )

    # Then it is stored as sent
    assert response.status_code == 201, response.content
    assert Fleet.objects.get(slug="cars-eu").description == "EU cars.\n"


def test_draft_cells_api__same_cell_twice__400_names_cell(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When one PATCH edits voice/interactive/normal twice
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [_cell_edit(threshold=0.7), _cell_edit(threshold=0.8)]},
        format="json",
    )

    # Then 400 names the cell, and nothing is saved
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {("voice/interactive/normal", "cell")}
    assert version_table(version=draft) == demo_table()


def test_draft_cells_api__invalid_cells__400_names_each_cell_and_field(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When a PATCH sets a good θ, a θ of 1.2 and weights that do not sum to 1
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {
            "revision": 1,
            "cells": [
                _cell_edit(threshold=0.7),
                _cell_edit(
                    {"task_type": "text", "latency_budget": "background", "privacy_tier": "normal"},
                    threshold=1.2,
                ),
                _cell_edit(
                    {
                        "task_type": "image",
                        "latency_budget": "interactive",
                        "privacy_tier": "normal",
                    },
                    weights={"lm": 0.9},
                ),
            ],
        },
        format="json",
    )

    # Then 400 names each bad cell and field; nothing is saved
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {
        ("text/background/normal", "threshold"),
        ("image/interactive/normal", "weights"),
    }
    assert version_table(version=draft) == demo_table()


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        pytest.param({"threshold": "0.5"}, "threshold", "must be a number; got '0.5'", id="string"),
        pytest.param({"threshold": True}, "threshold", "must be a number; got True", id="bool"),
        pytest.param({"threshold": None}, "threshold", "must be a number; got None", id="null"),
        pytest.param({"threshold": 1.5}, "threshold", "must be in [0, 1]; got 1.5", id="range"),
        pytest.param({"cache_ttl_s": 1.5}, "cache_ttl_s", "whole number", id="fraction"),
        pytest.param({"mode": "turbo"}, "mode", "device_only, cloud_only", id="choice"),
        pytest.param(
            {"upload": {"allowed": "yes"}}, "upload.allowed", "true or false", id="not-bool"
        ),
        pytest.param({"treshold": 0.5}, "treshold", "is not a field of a policy cell", id="typo"),
        pytest.param({"weights.size": 0.5}, "weights.size", "is not a field", id="flat-typo"),
    ],
)
def test_draft_cells_api__bad_value__400_names_cell_and_field_in_the_cells_words(
    client_as: Callable[[Any], APIClient],
    editor: Any,
    draft: PolicyVersion,
    values: dict[str, Any],
    field: str,
    words: str,
) -> None:
    # Given a draft
    # When a cell edit sends a value the cell cannot hold (as the document nests it, or flat)
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [_cell_edit(**values)]},
        format="json",
    )

    # Then 400 names the cell and the field with the words of the cell's own check (never
    # coerced, never clamped), and nothing is saved
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {("voice/interactive/normal", field)}
    assert words in error["details"][0]["message"]
    assert version_table(version=draft) == demo_table()


def test_draft_cells_api__flat_paths__saved(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When weights are sent as flat document paths
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {
            "revision": 1,
            "cells": [
                _cell_edit(**{"weights.length": 0.5, "weights.intent": 0.25, "weights.lm": 0.25})
            ],
        },
        format="json",
    )

    # Then they are saved as if sent nested
    assert response.status_code == 200, response.content
    cell = version_table(version=draft)[("voice", "interactive", "normal")]
    assert [cell[p] for p in ("weights.length", "weights.intent", "weights.lm")] == [
        0.5,
        0.25,
        0.25,
    ]


def test_draft_cells_api__unknown_key_in_a_cell_edit__400_names_it_nothing_saved(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft, whose schema closes a cell edit (DraftCellEdit: additionalProperties false)
    # When a cell edit carries a key the schema does not declare
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [{**_cell_edit(threshold=0.7), "note": "why"}]},
        format="json",
    )

    # Then 400 names it, and nothing is saved (a typo is never silently ignored)
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {("voice/interactive/normal", "note")}
    assert version_table(version=draft) == demo_table()


def test_draft_import_api__bad_value_and_broken_rule__400_names_both(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a document with a string θ in one cell and weights off 1 in another
    document = _demo_document(revision=1)
    document["cells"][0]["threshold"] = "0.5"
    document["cells"][4]["weights"]["lm"] = 0.9

    # When it is imported
    response = client_as(editor).put(f"{FLEET}/draft/document", document, format="json")

    # Then one 400 names both cells and fields, and nothing is imported
    error = assert_error(response, 400, "validation_failed")
    labels = [
        "/".join(document["cells"][i][k] for k in ("task_type", "latency_budget", "privacy_tier"))
        for i in (0, 4)
    ]
    assert _where(error) == {(labels[0], "threshold"), (labels[1], "weights")}
    draft.refresh_from_db()
    assert draft.revision == 1


@pytest.mark.parametrize("bad", ["Code", "code\n", "1st", "co de"])
def test_draft_dimensions_api__not_a_slug__400_names_value_nothing_added(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion, bad: str
) -> None:
    # Given a draft
    # When a value that is not a lowercase slug is added
    response = client_as(editor).post(
        f"{FLEET}/draft/dimensions/",
        {"revision": 1, "dimension": "task_type", "value": bad},
        format="json",
    )

    # Then 400 names the value, and nothing is added
    error = assert_error(response, 400, "validation_failed")
    assert [detail["field"] for detail in error["details"]] == ["value"]
    draft.refresh_from_db()
    assert draft.dimensions == SEED_DIMENSIONS


def test_draft_dimensions_api__existing_value__409(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft with task type voice
    # When voice is added again
    response = client_as(editor).post(
        f"{FLEET}/draft/dimensions/",
        {"revision": 1, "dimension": "task_type", "value": "voice"},
        format="json",
    )

    # Then 409
    assert_error(response, 409, "duplicate")
    draft.refresh_from_db()
    assert draft.revision == 1


def test_draft_dimensions_api__add_code__201_with_four_new_cells(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a 12-cell draft
    # When task type code is added as a copy of text
    response = client_as(editor).post(
        f"{FLEET}/draft/dimensions/",
        {"revision": 1, "dimension": "task_type", "value": "code", "copy_from": "text"},
        format="json",
    )

    # Then the answer shows 16 cells, the new ones with text's values
    assert response.status_code == 201, response.content
    document = response.json()["document"]
    assert document["dimensions"]["task_type"] == ["voice", "text", "image", "code"]
    assert len(document["cells"]) == 16
    assert response.json()["cell_count"] == 16


def test_publish_api__same_revision_twice__second_409(
    client_as: Callable[[Any], APIClient], publisher: Any, draft: PolicyVersion
) -> None:
    # Given a draft with one θ changed, at revision 2
    policy_draft_update_cells(
        actor=publisher, fleet=draft.fleet, revision=1, edits=[_cell_edit(threshold=0.7)]
    )
    client = client_as(publisher)

    # When it is published twice with revision 2
    first = client.post(f"{FLEET}/draft/publish/", {"revision": 2, "note": "a"}, format="json")
    second = client.post(f"{FLEET}/draft/publish/", {"revision": 2, "note": "a"}, format="json")

    # Then the first gives v2 with its ETag, the second 409, and there is no v3
    assert first.status_code == 201, first.content
    assert first.json()["version"] == 2
    assert first.headers["ETag"] == first.json()["etag"]
    assert_error(second, 409, "no_draft")
    assert list(
        PolicyVersion.objects.filter(number__isnull=False)
        .order_by("number")
        .values_list("number", flat=True)
    ) == [1, 2]


@pytest.mark.parametrize("body", [{"note": ""}, {"note": "  \n "}, {"note": "\x1e"}, {}])
def test_publish_api__blank_or_missing_note__400_naming_note_and_still_a_draft(
    client_as: Callable[[Any], APIClient],
    publisher: Any,
    draft: PolicyVersion,
    body: dict[str, Any],
) -> None:
    # Given a draft at revision 1
    # When it is published without a release note (empty, only whitespace, or left out)
    response = client_as(publisher).post(
        f"{FLEET}/draft/publish/", {"revision": 1, **body}, format="json"
    )

    # Then 400 names `note`, and the draft is not published
    error = assert_error(response, 400, "validation_failed")
    assert [detail["field"] for detail in error["details"]] == ["note"]
    assert PolicyVersion.objects.filter(pk=draft.pk, number__isnull=True).exists()


def test_draft_import_api__duplicated_cell__400_names_it(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft and a document listing image/background/normal twice
    document = _demo_document(revision=1)
    document["cells"].append(document["cells"][-1])

    # When it is imported
    response = client_as(editor).put(f"{FLEET}/draft/document", document, format="json")

    # Then 400 names the cell, and nothing is imported
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {("image/background/normal", "cell")}
    draft.refresh_from_db()
    assert draft.revision == 1


def test_draft_import_api__no_draft__creates_one_without_revision(
    client_as: Callable[[Any], APIClient], editor: Any, fleet: Any
) -> None:
    # Given fleet-a with v1 and no draft
    # When a document is imported without a revision
    response = client_as(editor).put(f"{FLEET}/draft/document", _demo_document(), format="json")

    # Then a draft at revision 1 holds it
    assert response.status_code == 200, response.content
    assert response.headers["ETag"] == '"r1"'
    assert len(response.json()["document"]["cells"]) == 12


# --- documents, export/import, diff, audit --------------------------------------------------


def test_export_then_import__round_trip__identical_table(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given v1 exported, and a draft changed since (θ raised, task type code added)
    client = client_as(editor)
    exported = client.get(f"{FLEET}/versions/1/document?download=1")
    assert exported.headers["Content-Disposition"] == 'attachment; filename="fleet-a-v1.json"'
    client.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [_cell_edit(threshold=0.9)]},
        format="json",
    )
    client.post(
        f"{FLEET}/draft/dimensions/",
        {"revision": 2, "dimension": "task_type", "value": "code"},
        format="json",
    )

    # When the export is imported into the draft, byte for byte as downloaded
    imported = client.generic(
        "PUT",
        f"{FLEET}/draft/document",
        exported.content,
        content_type="application/json",
        HTTP_IF_MATCH='"r3"',
    )

    # Then v1 and the draft do not differ at all
    assert imported.status_code == 200, imported.content
    diff = client.get(f"{FLEET}/diff/?a=1&b=draft").json()
    assert (diff["dimensions"], diff["cells"], diff["changed_cells"]) == ({}, [], 0)
    assert imported.json()["document"]["cells"] == exported.json()["cells"]


def test_version_document_api__etag_then_if_none_match__304(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any
) -> None:
    # Given a device that fetched v1's document
    client = client_as(viewer)
    first = client.get(f"{FLEET}/versions/latest/document")
    etag = first.headers["ETag"]

    # When it asks again with If-None-Match (alone, or among older tags)
    again = client.get(f"{FLEET}/versions/latest/document", HTTP_IF_NONE_MATCH=etag)
    among = client.get(f"{FLEET}/versions/latest/document", HTTP_IF_NONE_MATCH=f'"v0-0000", {etag}')

    # Then the ETag is the document's, and the repeats get 304 with no body
    assert first.status_code == 200
    assert etag == first.json()["etag"] == version_get(fleet=fleet, ref=1).etag
    assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", etag)
    assert among.status_code == 304


def test_version_document_api__weak_etag_from_a_proxy__304(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any
) -> None:
    # Given a device behind a compressing proxy, which turned v1's ETag into a weak one
    client = client_as(viewer)
    etag = client.get(f"{FLEET}/versions/1/document").headers["ETag"]

    # When it polls with W/"…"
    response = client.get(f"{FLEET}/versions/1/document", HTTP_IF_NONE_MATCH=f"W/{etag}")

    # Then it is still not sent the unchanged document again
    assert response.status_code == 304


def test_version_document_api__new_version_published__200_with_new_etag(
    client_as: Callable[[Any], APIClient], viewer: Any, publisher: Any, fleet: Any
) -> None:
    # Given a device holding v1's ETag, and v2 published since with θ raised
    client = client_as(viewer)
    old_etag = client.get(f"{FLEET}/versions/latest/document").headers["ETag"]
    policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher, fleet=fleet, revision=1, edits=[_cell_edit(threshold=0.7)]
    )
    policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")

    # When it polls `latest` with its old ETag
    response = client.get(f"{FLEET}/versions/latest/document", HTTP_IF_NONE_MATCH=old_etag)

    # Then it gets v2 with a new ETag
    assert response.status_code == 200
    assert response.json()["version"] == 2
    assert response.headers["ETag"] not in (old_etag, "")


def test_version_document_api__draft__etag_is_its_revision(
    client_as: Callable[[Any], APIClient], viewer: Any, draft: PolicyVersion
) -> None:
    # Given a draft at revision 1
    # When its document is read
    response = client_as(viewer).get(f"{FLEET}/versions/draft/document")

    # Then the ETag names the revision (to send back as If-Match), and there is no version yet
    assert response.headers["ETag"] == '"r1"'
    assert response.json()["version"] is None


def test_diff_api__edited_draft__names_changed_cells_and_fields(
    client_as: Callable[[Any], APIClient], editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft with θ 0.65 → 0.7 and cache 600 → 60 in voice/interactive/normal
    client = client_as(editor)
    client.patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [_cell_edit(threshold=0.7, cache_ttl_s=60)]},
        format="json",
    )

    # When v1 and the draft are diffed
    diff = client.get(f"{FLEET}/diff/?a=1&b=draft").json()

    # Then exactly that cell and its two fields are named, with before and after
    assert (diff["a"], diff["b"], diff["changed_cells"]) == ("v1", "draft", 1)
    assert diff["cells"] == [
        {
            "cell": "voice/interactive/normal",
            "status": "changed",
            "fields": [
                {"field": "cache_ttl_s", "before": 600, "after": 60},
                {"field": "threshold", "before": 0.65, "after": 0.7},
            ],
        }
    ]


def test_diff_api__second_version_missing__400_names_it(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any
) -> None:
    # Given a fleet
    # When the diff names only `a`
    response = client_as(viewer).get(f"{FLEET}/diff/?a=1")

    # Then 400 names `b`
    error = assert_error(response, 400, "validation_failed")
    assert _where(error) == {(None, "b")}


def test_audit_api__after_edit__lists_entries_newest_first_with_diff(
    client_as: Callable[[Any], APIClient], editor: Any, viewer: Any, draft: PolicyVersion
) -> None:
    # Given fleet-a created and published by the publisher, and θ edited by the editor
    client_as(editor).patch(
        f"{FLEET}/draft/cells/",
        {"revision": 1, "cells": [_cell_edit(threshold=0.7)]},
        format="json",
    )
    make_fleet(slug="fleet-b")

    # When a viewer reads fleet-a's audit log
    entries = client_as(viewer).get(f"{FLEET}/audit/").json()["results"]

    # Then it lists fleet-a's entries only, newest first, the edit with its diff
    assert [e["action"] for e in entries] == [
        "policy_cells.updated",
        "policy_draft.created",
        "policy_version.published",
        "fleet.created",
    ]
    assert {e["fleet"] for e in entries} == {"fleet-a"}
    edit = entries[0]
    assert edit["actor"] == "editor"
    assert edit["at"]
    assert edit["diff"] == [
        {"field": "voice/interactive/normal.threshold", "before": 0.65, "after": 0.7}
    ]


def test_audit_api__all_fleets_and_limit__filtered(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any
) -> None:
    # Given two fleets, each created and published (2 entries each)
    make_fleet(slug="fleet-b")
    client = client_as(viewer)

    # When the global log is read whole, by fleet, and with a limit
    everything = client.get("/api/v1/audit/").json()["results"]
    only_b = client.get("/api/v1/audit/?fleet=fleet-b").json()["results"]
    newest = client.get("/api/v1/audit/?limit=1").json()["results"]
    bad_limit = client.get("/api/v1/audit/?limit=many")

    # Then each answers as asked
    assert len(everything) == 4
    assert {e["fleet"] for e in only_b} == {"fleet-b"}
    assert len(only_b) == 2
    assert newest == everything[:1]
    assert _where(assert_error(bad_limit, 400)) == {(None, "limit")}


@pytest.mark.parametrize("query", ["fleet-a%0A", "%20fleet-a"])
def test_audit_api__fleet_with_whitespace__400_names_fleet(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any, query: str
) -> None:
    # Given fleet-a
    # When its log is asked for with a newline or a space about the slug
    response = client_as(viewer).get(f"/api/v1/audit/?fleet={query}")

    # Then 400 names `fleet`: the slug is not trimmed into one that exists
    assert _where(assert_error(response, 400)) == {(None, "fleet")}


def test_fleet_detail_api__draft_and_versions__reported(
    client_as: Callable[[Any], APIClient], viewer: Any, publisher: Any, fleet: Any
) -> None:
    # Given fleet-a at v2 with a new draft edited to revision 2, and fleet-b never published
    draft_changed(fleet=fleet, actor=publisher)
    policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")
    policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher, fleet=fleet, revision=1, edits=[_cell_edit(threshold=0.7)]
    )
    make_fleet(slug="fleet-b", publish=False)
    client = client_as(viewer)

    # When the fleet and the fleet list are read
    detail = client.get(f"{FLEET}/").json()
    listed = {f["slug"]: f for f in client.get("/api/v1/fleets/").json()["results"]}

    # Then both show the latest published version and the draft's revision
    assert (detail["latest_version"], detail["draft_revision"]) == (2, 2)
    assert (listed["fleet-a"]["latest_version"], listed["fleet-a"]["draft_revision"]) == (2, 2)
    assert (listed["fleet-b"]["latest_version"], listed["fleet-b"]["draft_revision"]) == (None, 1)


def test_version_list_api__draft_first_then_newest(
    client_as: Callable[[Any], APIClient], viewer: Any, publisher: Any, fleet: Any
) -> None:
    # Given v1, v2 and a draft based on v2
    draft_changed(fleet=fleet, actor=publisher)
    policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="second")
    policy_draft_create(actor=publisher, fleet=fleet)

    # When the versions are listed
    results = client_as(viewer).get(f"{FLEET}/versions/").json()["results"]

    # Then the draft comes first, then v2, v1, with their people and sources
    assert [(v["status"], v["version"], v["based_on"]) for v in results] == [
        ("draft", None, 2),
        ("published", 2, 1),
        ("published", 1, None),
    ]
    assert results[1]["published_by"] == "publisher"
    assert results[1]["note"] == "second"
    assert results[0]["cell_count"] == 12


# --- query counts --------------------------------------------------------------------------


@pytest.mark.parametrize("fleets", [1, 6])
def test_fleet_list_api__n_fleets__constant_query_count(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    publisher: Any,
    django_assert_max_num_queries: Any,
    fleets: int,
) -> None:
    # Given N fleets, every other one with a draft
    for index in range(fleets):
        fleet = make_fleet(slug=f"fleet-{index}", actor=publisher)
        if index % 2:
            policy_draft_create(actor=publisher, fleet=fleet)
    client = client_as(viewer)

    # When the fleets are listed
    with django_assert_max_num_queries(FLEET_LIST_QUERIES):
        response = client.get("/api/v1/fleets/")

    # Then all are there, in the same number of queries whatever N is
    assert len(response.json()["results"]) == fleets
    # each with its own draft, or none
    drafts = {row["slug"]: row["draft_revision"] for row in response.json()["results"]}
    assert drafts == {f"fleet-{index}": (1 if index % 2 else None) for index in range(fleets)}


@pytest.mark.parametrize("versions", [1, 6])
def test_version_list_api__n_versions__constant_query_count(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    publisher: Any,
    fleet: Any,
    django_assert_max_num_queries: Any,
    versions: int,
) -> None:
    # Given N published versions and a draft
    for _ in range(versions - 1):
        draft_changed(fleet=fleet, actor=publisher)
        policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")
    policy_draft_create(actor=publisher, fleet=fleet)
    client = client_as(viewer)

    # When the versions are listed
    with django_assert_max_num_queries(VERSION_LIST_QUERIES):
        response = client.get(f"{FLEET}/versions/")

    # Then all are there, in the same number of queries whatever N is
    assert len(response.json()["results"]) == versions + 1
    # the draft first, then the published versions, newest first
    listed = [(row["status"], row["version"]) for row in response.json()["results"]]
    assert listed == [("draft", None)] + [("published", n) for n in range(versions, 0, -1)]


@pytest.mark.parametrize("path", list(AUDIT_LIST_QUERIES))
@pytest.mark.parametrize("edits", [1, 6])
def test_audit_list_api__n_entries__constant_query_count(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    editor: Any,
    draft: PolicyVersion,
    django_assert_max_num_queries: Any,
    edits: int,
    path: str,
) -> None:
    # Given N edits on top of the fleet's creation, publish and draft
    for revision in range(1, edits + 1):
        policy_draft_update_cells(
            actor=editor,
            fleet=draft.fleet,
            revision=revision,
            edits=[_cell_edit(cache_ttl_s=revision)],
        )
    client = client_as(viewer)

    # When the audit log is listed
    with django_assert_max_num_queries(AUDIT_LIST_QUERIES[path]):
        response = client.get(path)

    # Then every entry is there, in the same number of queries whatever N is
    assert len(response.json()["results"]) == edits + 3
    # newest first
    actions = [row["action"] for row in response.json()["results"]]
    assert actions == ["policy_cells.updated"] * edits + [
        "policy_draft.created",
        "policy_version.published",
        "fleet.created",
    ]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("delete", f"{FLEET}/draft/dimensions/"),
        ("post", f"{FLEET}/draft/dimensions/task_type/code/"),
        ("put", f"{FLEET}/draft/cells/"),
        ("post", f"{FLEET}/versions/1/document"),
    ],
)
def test_api__method_a_route_does_not_serve__405_and_nothing_stored(
    client_as: Callable[[Any], APIClient],
    publisher: Any,
    draft: PolicyVersion,
    method: str,
    path: str,
) -> None:
    # Given a draft at revision 1
    before = _stored_state()

    # When a route is called with a method it does not serve (e.g. DELETE without a value)
    response = getattr(client_as(publisher), method)(
        path, {"revision": 1, "dimension": "task_type", "value": "code"}, format="json"
    )

    # Then 405 in the error shape, and nothing changed
    assert_error(response, 405, "method_not_allowed")
    assert _stored_state() == before


def _api_routes() -> list[tuple[str, type[Any]]]:
    """(path with sample arguments, view class) of every DRF view under /api/v1/."""
    from django.urls import URLPattern, URLResolver, get_resolver
    from rest_framework.views import APIView

    samples = {"slug": "fleet-a", "ref": "1", "rule_id": "1", "webhook_id": "1"}
    samples |= {"device_id": "phone-1", "dimension": "task_type", "value": "voice"}
    samples |= {"request_id": "1", "schedule_id": "1", "backtest_id": "1", "number": "1"}
    routes = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "cls", None)
                path = prefix + str(pattern.pattern)
                if isinstance(view, type) and issubclass(view, APIView) and "api/v1" in path:
                    for name, sample in samples.items():
                        path = re.sub(rf"<(?:\w+:)?{name}>", sample, path)
                    routes.append(("/" + path, view))

    walk(get_resolver().url_patterns, "")
    return routes


def test_api__trace_on_every_endpoint__405_with_allow_before_auth(
    api_client: APIClient, fleet: Any
) -> None:
    # Given every endpoint of the API, and a client with no credentials at all
    routes = _api_routes()
    assert len(routes) > 30

    for path, view in routes:
        # When it is called with TRACE, which none of them serves
        response = api_client.generic("TRACE", path)

        # Then 405 in the error shape, with the methods it does serve (never 401 or 403)
        assert response.status_code == 405, (path, response.content)
        assert response.json()["error"]["code"] == "method_not_allowed"
        served = {m.upper() for m in view.http_method_names if hasattr(view, m)}
        assert set(response["Allow"].split(", ")) >= served, path


def test_api__unsupported_method__405_with_error_shape(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any
) -> None:
    # Given a viewer
    # When an unsupported method is used on a read-only endpoint
    response = client_as(viewer).delete(f"{FLEET}/versions/1/")

    # Then 405 comes in the same JSON error shape
    error = assert_error(response, 405, "method_not_allowed")
    assert "DELETE" in error["message"]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        # A key of no field inside a group, an empty key (schemathesis found it answered 500).
        ({"upload": {"": [], "allowed": False}, "upload.max_bytes": 1024}, "upload"),
        # A field sent both nested and by its flat path: which one was meant is not guessed.
        ({"weights": {"length": 0.5}, "weights.length": 0.6}, "weights.length"),
        # A group that is not an object, with a flat path of it beside.
        ({"upload": [], "upload.allowed": True}, "upload"),
    ],
)
def test_draft_cells_api__group_and_flat_path_clash__400_names_it_nothing_stored(
    client_as: Callable[[Any], APIClient],
    editor: Any,
    draft: PolicyVersion,
    values: dict[str, Any],
    field: str,
) -> None:
    # Given a draft / When a cell edit's values mix a group with keys no field has
    before = _stored_state()
    response = client_as(editor).patch(
        f"{FLEET}/draft/cells/", {"revision": 1, "cells": [_cell_edit(**values)]}, format="json"
    )

    # Then 400 names the field in the cell's own words, and nothing is stored
    error = assert_error(response, 400, "validation_failed")
    assert any(field in str(detail["field"]) for detail in error["details"]), error["details"]
    assert _stored_state() == before
