"""The policy editor pages, as a browser uses them: forms posted, pages read, roles enforced."""

import json
import re
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings

from controlplane.roles import Role
from routing_policies import selectors, services
from routing_policies.cell_schema import FIELDS_BY_PATH
from routing_policies.models import AuditEntry, Fleet, PolicyVersion
from tests.factories import draft_changed

SLUG = "fleet-a"
FLEET_URL = f"/fleets/{SLUG}/"
TEXT_NORMAL = ("text", "interactive", "normal")


def cell_html(page: str, label: str) -> str:
    """The HTML of one grid cell (`<td data-cell="voice/interactive/normal">…</td>`)."""
    match = re.search(
        rf'<td class="([^"]*)" data-cell="{re.escape(label)}"[^>]*>(.*?)</td>', page, re.S
    )
    assert match, f"no grid cell {label} on the page"
    return f'class="{match.group(1)}" {match.group(2)}'


def theta_shown(page: str, label: str) -> str:
    """The θ a grid cell shows on its face."""
    match = re.search(r'class="v theta[^"]*">([^<]+)<', cell_html(page, label))
    assert match, f"cell {label} shows no θ"
    return match.group(1)


def text_of(response: Any) -> str:
    return response.content.decode()


def edit_form(revision: int, cells: list[tuple[str, str, str]], **values: str) -> dict[str, Any]:
    """What the edit panel posts: selected cells, the revision, the filled-in fields."""
    data: dict[str, Any] = {"revision": str(revision), "cell": ["/".join(key) for key in cells]}
    for path, value in values.items():
        data[f"value-{path.replace('__', '.')}"] = value
    return data


def cell_values(fleet: Fleet, key: tuple[str, str, str], ref: str = "draft") -> dict[str, Any]:
    version = selectors.version_get(fleet=fleet, ref=ref)
    return selectors.version_table(version=version)[key]


@pytest.fixture
def draft_fleet(fleet: Fleet, editor: Any) -> Fleet:
    """The published fleet with a draft (revision 1) started by `editor`."""
    services.policy_draft_create(actor=editor, fleet=fleet)
    return fleet


def as_user(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


# --- access -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/",
        FLEET_URL,
        f"{FLEET_URL}?version=1",
        f"{FLEET_URL}versions/",
        f"{FLEET_URL}diff/?a=1&b=1",
        f"{FLEET_URL}audit/",
        f"{FLEET_URL}draft/import/",
    ],
)
def test_pages__anonymous__redirected_to_login(client: Client, fleet: Fleet, path: str) -> None:
    # Given an anonymous visitor
    # When they open a page
    response = client.get(path)

    # Then they are sent to the login page, coming back afterwards
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_login_page__debug_on__lists_demo_logins(client: Client, db: None) -> None:
    # Given development mode
    with override_settings(DEBUG=True):
        # When the login page is opened
        page = text_of(client.get("/login/"))

    # Then the demo logins of every role are shown
    assert "Demo logins" in page
    for username, password in [
        ("viewer", "demo-viewer"),
        ("editor", "demo-editor"),
        ("publisher", "demo-publisher"),
        ("admin", "demo-admin"),
    ]:
        assert username in page
        assert password in page


def test_login_page__debug_off__hides_demo_logins(client: Client, db: None) -> None:
    # Given production mode
    with override_settings(DEBUG=False):
        # When the login page is opened
        response = client.get("/login/")

    # Then it asks for a login without giving any password away
    assert response.status_code == 200
    assert "Demo logins" not in text_of(response)
    assert "demo-publisher" not in text_of(response)


def test_login__demo_password__lands_on_fleet_list(
    client: Client, fleet: Fleet, make_user: Any
) -> None:
    # Given a viewer with a password
    make_user(Role.VIEWER, username="vera")

    # When they log in through the form
    response = client.post(
        "/login/", {"username": "vera", "password": "test-password-123"}, follow=True
    )

    # Then they see the fleets, their name and their role in the top bar
    page = text_of(response)
    assert response.status_code == 200
    assert SLUG in page
    assert "vera" in page
    assert "viewer" in page


def test_fleet_page__user_without_role__403(client: Client, fleet: Fleet, make_user: Any) -> None:
    # Given a user who belongs to no role group
    as_user(client, make_user(None, username="nobody"))

    # When they open a fleet
    response = client.get(FLEET_URL)

    # Then they are told they need the viewer role
    assert response.status_code == 403
    assert "You need the viewer role (or higher) to read policies." in text_of(response)


def test_fleet_page__unknown_fleet__404(client: Client, viewer: Any) -> None:
    # Given a viewer
    as_user(client, viewer)

    # When they open a fleet that does not exist
    response = client.get("/fleets/nope/")

    # Then the page says so
    assert response.status_code == 404
    assert "nope" in text_of(response)


# --- reading ----------------------------------------------------------------------------------


def test_fleet_list__viewer__sees_latest_version_and_draft_state(
    client: Client, draft_fleet: Fleet, viewer: Any
) -> None:
    # Given a fleet published as v1 with an open draft
    as_user(client, viewer)

    # When a viewer opens the fleet list
    page = text_of(client.get("/"))

    # Then the fleet, its latest version and its draft are listed, without the new-fleet form
    assert SLUG in page
    assert "v1" in page
    assert "draft open" in page
    assert "New fleet" not in page


def test_fleet_page__viewer__sees_grid_read_only(
    client: Client, draft_fleet: Fleet, viewer: Any
) -> None:
    # Given a fleet with a draft
    as_user(client, viewer)

    # When a viewer opens it
    response = client.get(FLEET_URL)

    # Then the matrix shows every cell with its mode, θ, budget and upload, and no edit controls
    page = text_of(response)
    assert response.status_code == 200
    assert "Draft · revision 1" in page
    voice = cell_html(page, "voice/interactive/sensitive")
    assert "mode-device_only" in voice
    assert "300 ms" in voice
    assert "no upload" in voice
    assert "mode-cloud_only" in cell_html(page, "image/background/normal")
    assert "mode-draft_refine" in cell_html(page, "image/interactive/normal")
    assert theta_shown(page, "voice/interactive/normal") == "0.65"
    assert 'id="edit-form"' not in page
    assert "Publish as" not in page
    assert "/api/v1/fleets/fleet-a/versions/draft/document?download=1" in page


def test_fleet_page__version_query__shows_that_version_read_only(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given a draft whose θ differs from v1
    draft = selectors.draft_get(fleet=draft_fleet)
    assert draft is not None
    services.policy_draft_update_cells(
        actor=editor,
        fleet=draft_fleet,
        revision=1,
        edits=[
            {
                **dict(
                    zip(("task_type", "latency_budget", "privacy_tier"), TEXT_NORMAL, strict=True)
                ),
                "values": {"threshold": 0.8},
            }
        ],
    )
    as_user(client, editor)

    # When the editor opens ?version=1
    page = text_of(client.get(f"{FLEET_URL}?version=1"))

    # Then v1's values are shown, read-only, with a way back to the draft
    assert "v1 · published" in page
    assert theta_shown(page, "text/interactive/normal") == "0.6"
    assert 'id="edit-form"' not in page
    assert "read-only" in page
    assert "Open the draft" in page


# --- roles on writes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("draft/cells/", edit_form(1, [TEXT_NORMAL], threshold="0.9")),
        ("draft/publish/", {"revision": "1", "note": "sneaky"}),
        ("draft/discard/", {"revision": "1"}),
        ("draft/start/", {}),
        (
            "draft/dimensions/add/",
            {"revision": "1", "dimension": "task_type", "value": "code", "copy_from": ""},
        ),
        (
            "draft/dimensions/remove/",
            {"revision": "1", "dimension": "task_type", "value": "image"},
        ),
        ("draft/import/", {"revision": "1", "document_text": "{}"}),
    ],
)
def test_post__viewer__403_and_nothing_changes(
    client: Client, draft_fleet: Fleet, viewer: Any, path: str, data: dict[str, Any]
) -> None:
    # Given a viewer looking at a fleet with a draft
    as_user(client, viewer)
    audit_before = AuditEntry.objects.count()

    # When they post any change
    response = client.post(f"{FLEET_URL}{path}", data)

    # Then it is refused and the draft is as it was
    assert response.status_code == 403
    assert "You are a viewer." in text_of(response)
    draft = selectors.draft_get(fleet=draft_fleet)
    assert draft is not None
    assert draft.revision == 1
    assert cell_values(draft_fleet, TEXT_NORMAL)["threshold"] == 0.6
    assert AuditEntry.objects.count() == audit_before


def test_fleet_create__viewer__403(client: Client, viewer: Any) -> None:
    # Given a viewer
    as_user(client, viewer)

    # When they post the new-fleet form
    response = client.post("/fleets/new/", {"slug": "mine", "name": "Mine"})

    # Then it is refused and no fleet appears
    assert response.status_code == 403
    assert not Fleet.objects.filter(slug="mine").exists()


def test_publish__editor__403_and_still_a_draft(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor with an open draft
    as_user(client, editor)

    # When they post the publish form
    response = client.post(f"{FLEET_URL}draft/publish/", {"revision": "1", "note": "go"})

    # Then it is refused: only publishers publish
    assert response.status_code == 403
    assert "publisher role" in text_of(response)
    assert selectors.draft_get(fleet=draft_fleet) is not None
    assert selectors.latest_published(fleet=draft_fleet).number == 1  # type: ignore[union-attr]


def test_fleet_page__editor__sees_edit_panel_but_no_publish(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they open the draft
    page = text_of(client.get(FLEET_URL))

    # Then the edit panel shows every cell field with its unit, and publishing is not offered
    assert 'id="edit-form"' in page
    for spec in FIELDS_BY_PATH.values():
        assert f'name="value-{spec.path}"' in page
    assert 'Latency budget <span class="unit">ms</span>' in page
    assert 'name="revision" value="1"' in page
    assert "Publish as" not in page
    assert "Discard draft" in page


# --- editing cells ----------------------------------------------------------------------------


def test_cell_edit__editor_changes_threshold__grid_shows_new_value(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor on the draft at revision 1
    as_user(client, editor)

    # When they select one cell and set θ to 0.72
    response = client.post(
        f"{FLEET_URL}draft/cells/", edit_form(1, [TEXT_NORMAL], threshold="0.72")
    )

    # Then they are sent back to the grid, the cell still selected, which shows the new value
    # and the next revision
    assert response.status_code == 302
    assert response["Location"] == f"{FLEET_URL}?cell=text/interactive/normal"
    page = text_of(client.get(response["Location"]))
    assert "selected" in cell_html(page, "text/interactive/normal").split('"')[1]
    assert re.search(r'value="text/interactive/normal"[^>]* checked', page)
    assert theta_shown(page, "text/interactive/normal") == "0.72"
    assert "Saved Threshold θ on text/interactive/normal" in page
    assert "revision 2" in page
    assert cell_values(draft_fleet, TEXT_NORMAL)["threshold"] == 0.72


def test_cell_edit__several_cells_some_fields__only_filled_fields_change(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given three cells with different latency budgets
    as_user(client, editor)
    cells = [
        ("text", "interactive", "normal"),
        ("text", "background", "normal"),
        ("voice", "background", "normal"),
    ]
    before = {key: cell_values(draft_fleet, key) for key in cells}

    # When θ and the cache TTL are filled in and every other field is left blank
    response = client.post(
        f"{FLEET_URL}draft/cells/",
        edit_form(
            1,
            cells,
            threshold="0.5",
            cache_ttl_s="120",
            mode="",
            latency_budget_ms="",
            upload__allowed="",
        ),
    )

    # Then only those two fields changed, on all three cells
    assert response.status_code == 302
    for key in cells:
        after = cell_values(draft_fleet, key)
        assert after["threshold"] == 0.5
        assert after["cache_ttl_s"] == 120
        unchanged = {k: v for k, v in after.items() if k not in {"threshold", "cache_ttl_s"}}
        assert unchanged == {
            k: v for k, v in before[key].items() if k not in {"threshold", "cache_ttl_s"}
        }
    assert cell_values(draft_fleet, ("image", "background", "normal"))["threshold"] == 0.6


def test_cell_edit__booleans_and_choices__applied(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they switch a cell to draft_refine with uploads no longer de-identified
    response = client.post(
        f"{FLEET_URL}draft/cells/",
        edit_form(1, [TEXT_NORMAL], mode="draft_refine", upload__deidentify="false"),
    )

    # Then the grid colours the cell as draft_refine and the value is saved
    assert response.status_code == 302
    values = cell_values(draft_fleet, TEXT_NORMAL)
    assert values["mode"] == "draft_refine"
    assert values["upload.deidentify"] is False
    page = text_of(client.get(FLEET_URL))
    assert "mode-draft_refine" in cell_html(page, "text/interactive/normal")


def test_cell_edit__stale_revision__409_with_message_and_nothing_saved(
    client: Client, draft_fleet: Fleet, editor: Any, make_user: Any
) -> None:
    # Given someone else saved the draft after the editor opened it (now revision 2)
    other = make_user(Role.EDITOR, username="other")
    services.policy_draft_update_cells(
        actor=other,
        fleet=draft_fleet,
        revision=1,
        edits=[
            {
                "task_type": "voice",
                "latency_budget": "background",
                "privacy_tier": "normal",
                "values": {"cache_ttl_s": 60},
            }
        ],
    )
    as_user(client, editor)

    # When the editor saves their edit made on revision 1
    response = client.post(f"{FLEET_URL}draft/cells/", edit_form(1, [TEXT_NORMAL], threshold="0.9"))

    # Then they are told what happened, with 409, and their change is not saved
    page = text_of(response)
    assert response.status_code == 409
    assert (
        "Someone else changed this draft since you opened it (you had revision 1, it is now 2). "
        "Your changes were not saved. Reload to see their changes."
    ) in page
    assert 'value="0.9"' in page  # their input is kept
    assert cell_values(draft_fleet, TEXT_NORMAL)["threshold"] == 0.6
    assert selectors.draft_get(fleet=draft_fleet).revision == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("abc", "must be a number such as 0.6; got &#x27;abc&#x27;"),
        ("nan", "must be a finite number; got nan"),
        ("1.5", "must be in [0, 1]; got 1.5"),
    ],
)
def test_cell_edit__bad_threshold__error_names_cell_and_field_and_nothing_saved(
    client: Client, draft_fleet: Fleet, editor: Any, typed: str, expected: str
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they type a θ that is not a number in [0, 1]
    response = client.post(f"{FLEET_URL}draft/cells/", edit_form(1, [TEXT_NORMAL], threshold=typed))

    # Then the page says which cell and which field, highlights the cell and keeps the input
    page = text_of(response)
    assert response.status_code == 400
    assert "text/interactive/normal</strong> — Threshold θ: " + expected in page
    cell = cell_html(page, "text/interactive/normal")
    assert "has-error" in cell
    assert "Threshold θ: " + expected in cell
    assert f'value="{typed}"' in page
    assert cell_values(draft_fleet, TEXT_NORMAL)["threshold"] == 0.6
    assert selectors.draft_get(fleet=draft_fleet).revision == 1  # type: ignore[union-attr]


def test_cell_edit__whole_number_field_given_fraction__refused(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they give a latency budget of 12.5 ms
    response = client.post(
        f"{FLEET_URL}draft/cells/", edit_form(1, [TEXT_NORMAL], latency_budget_ms="12.5")
    )

    # Then it is refused as not a whole number
    assert response.status_code == 400
    assert "Latency budget (ms): must be a whole number; got 12.5" in text_of(response)
    assert cell_values(draft_fleet, TEXT_NORMAL)["latency_budget_ms"] == 1000


def test_cell_edit__cloud_only_on_sensitive_without_upload__refused_with_contradiction(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given voice/interactive/sensitive, whose uploads are not allowed
    as_user(client, editor)
    key = ("voice", "interactive", "sensitive")

    # When an editor makes it cloud_only
    response = client.post(f"{FLEET_URL}draft/cells/", edit_form(1, [key], mode="cloud_only"))

    # Then the contradiction is explained on that cell, and nothing is saved
    page = text_of(response)
    assert response.status_code == 400
    assert "cloud_only contradicts a sensitive tier whose uploads are not allowed" in cell_html(
        page, "voice/interactive/sensitive"
    )
    assert cell_values(draft_fleet, key)["mode"] == "device_only"


def test_cell_edit__no_cell_selected__asks_for_a_selection(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they save without selecting a cell
    response = client.post(f"{FLEET_URL}draft/cells/", edit_form(1, [], threshold="0.5"))

    # Then they are told to select one
    assert response.status_code == 400
    assert "select at least one cell" in text_of(response)


def test_cell_edit__one_of_several_cells_invalid__none_saved(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given a valid cell and a sensitive cell without uploads selected together
    as_user(client, editor)
    cells = [TEXT_NORMAL, ("image", "interactive", "sensitive")]

    # When both are made cloud_only
    response = client.post(f"{FLEET_URL}draft/cells/", edit_form(1, cells, mode="cloud_only"))

    # Then only the invalid cell is flagged, and neither is saved
    page = text_of(response)
    assert response.status_code == 400
    assert "has-error" in cell_html(page, "image/interactive/sensitive")
    assert "has-error" not in cell_html(page, "text/interactive/normal")
    assert cell_values(draft_fleet, TEXT_NORMAL)["mode"] == "auto"


# --- drafts, dimensions, publishing -----------------------------------------------------------


def test_draft_start__editor__draft_from_chosen_version(
    client: Client, fleet: Fleet, editor: Any
) -> None:
    # Given a fleet without a draft
    as_user(client, editor)
    assert "Start a draft" in text_of(client.get(FLEET_URL))

    # When an editor starts one from v1
    response = client.post(f"{FLEET_URL}draft/start/", {"from_version": "1"}, follow=True)

    # Then the draft is open for editing
    page = text_of(response)
    assert "Started a draft from v1" in page
    assert 'id="edit-form"' in page
    draft = selectors.draft_get(fleet=fleet)
    assert draft is not None
    assert draft.based_on.number == 1  # type: ignore[union-attr]


def test_draft_discard__editor__draft_gone(client: Client, draft_fleet: Fleet, editor: Any) -> None:
    # Given a draft
    as_user(client, editor)

    # When the editor discards it
    response = client.post(f"{FLEET_URL}draft/discard/", {"revision": "1"}, follow=True)

    # Then the fleet shows v1 and offers a new draft
    page = text_of(response)
    assert "Discarded the draft" in page
    assert "Start a draft" in page
    assert selectors.draft_get(fleet=draft_fleet) is None


def test_dimension_add__editor__new_row_copied_from_chosen_value(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor on the draft
    as_user(client, editor)

    # When they add task type "code" copied from "text"
    response = client.post(
        f"{FLEET_URL}draft/dimensions/add/",
        {"revision": "1", "dimension": "task_type", "value": "code", "copy_from": "text"},
        follow=True,
    )

    # Then the grid has code rows with text's values
    page = text_of(response)
    assert "Added task type &#x27;code&#x27;" in page
    assert "1,000 ms" in cell_html(page, "code/interactive/normal")
    assert cell_values(draft_fleet, ("code", "interactive", "normal")) == cell_values(
        draft_fleet, TEXT_NORMAL
    )


def test_dimension_add__bad_value__error_and_nothing_added(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they add a value that is not a slug
    response = client.post(
        f"{FLEET_URL}draft/dimensions/add/",
        {"revision": "1", "dimension": "task_type", "value": "Big Code", "copy_from": ""},
    )

    # Then the value is refused with the rule, and the form keeps it
    page = text_of(response)
    assert response.status_code == 400
    assert "is not a valid value" in page
    assert 'value="Big Code"' in page
    assert selectors.draft_get(fleet=draft_fleet).dimensions["task_type"] == [  # type: ignore[union-attr]
        "voice",
        "text",
        "image",
    ]


def test_dimension_remove__editor__value_and_cells_gone(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they remove task type "image"
    response = client.post(
        f"{FLEET_URL}draft/dimensions/remove/",
        {"revision": "1", "dimension": "task_type", "value": "image"},
        follow=True,
    )

    # Then the image rows are gone
    page = text_of(response)
    assert "Removed task type &#x27;image&#x27;" in page
    assert 'data-cell="image/' not in page
    assert len(selectors.version_table(version=selectors.draft_get(fleet=draft_fleet))) == 8  # type: ignore[arg-type]


def test_publish__publisher__new_version_appears(
    client: Client, draft_fleet: Fleet, publisher: Any
) -> None:
    # Given a draft with one change
    services.policy_draft_update_cells(
        actor=publisher,
        fleet=draft_fleet,
        revision=1,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.7},
            }
        ],
    )
    as_user(client, publisher)
    assert "Publish as v2" in text_of(client.get(FLEET_URL))

    # When the publisher publishes it with a note
    response = client.post(
        f"{FLEET_URL}draft/publish/", {"revision": "2", "note": "Raise θ for text"}
    )

    # Then they land on v2, which carries the note and the value
    assert response.status_code == 302
    assert response["Location"] == f"{FLEET_URL}?version=2"
    page = text_of(client.get(response["Location"]))
    assert "Published v2" in page
    assert "v2 · published" in page
    assert "Raise θ for text" in page
    assert theta_shown(page, "text/interactive/normal") == "0.7"
    assert selectors.latest_published(fleet=draft_fleet).number == 2  # type: ignore[union-attr]
    versions = text_of(client.get(f"{FLEET_URL}versions/"))
    assert "Raise θ for text" in versions


def test_publish__stale_revision__409_and_still_a_draft(
    client: Client, draft_fleet: Fleet, publisher: Any
) -> None:
    # Given a publisher whose page shows revision 1 while the draft moved on to 2
    services.policy_draft_update_cells(
        actor=publisher,
        fleet=draft_fleet,
        revision=1,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.7},
            }
        ],
    )
    as_user(client, publisher)

    # When they publish revision 1
    response = client.post(f"{FLEET_URL}draft/publish/", {"revision": "1", "note": "go"})

    # Then nothing is published and they are told to reload
    assert response.status_code == 409
    assert "you had revision 1, it is now 2" in text_of(response)
    assert selectors.latest_published(fleet=draft_fleet).number == 1  # type: ignore[union-attr]


def test_fleet_create__publisher__fleet_with_draft(client: Client, publisher: Any) -> None:
    # Given a publisher on the fleet list, which offers the new-fleet form
    as_user(client, publisher)
    assert "New fleet" in text_of(client.get("/"))

    # When they create a fleet
    response = client.post(
        "/fleets/new/", {"slug": "car-cabin", "name": "Car cabin", "description": ""}, follow=True
    )

    # Then they land on its draft
    page = text_of(response)
    assert "Created fleet car-cabin" in page
    assert "Draft · revision 1" in page


def test_fleet_create__duplicate_slug__error_on_slug(
    client: Client, fleet: Fleet, publisher: Any
) -> None:
    # Given a fleet called fleet-a
    as_user(client, publisher)

    # When a publisher creates another fleet-a
    response = client.post("/fleets/new/", {"slug": SLUG, "name": "Again"})

    # Then the form says the slug is taken
    assert response.status_code == 409
    assert "already exists" in text_of(response)


# --- import -----------------------------------------------------------------------------------


def test_import__exported_document__round_trips_into_draft(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given v1 exported through the page's Export JSON link, and a draft that differs from v1
    as_user(client, editor)
    export = client.get(f"/api/v1/fleets/{SLUG}/versions/1/document?download=1")
    assert export.status_code == 200
    assert "attachment" in export["Content-Disposition"]
    services.policy_draft_update_cells(
        actor=editor,
        fleet=draft_fleet,
        revision=1,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.9},
            }
        ],
    )

    # When the editor uploads that file into the draft
    response = client.post(
        f"{FLEET_URL}draft/import/",
        {
            "revision": "2",
            "document_file": SimpleUploadedFile(
                "fleet-a-v1.json", export.content, content_type="application/json"
            ),
        },
    )

    # Then the draft's table is v1's again
    assert response.status_code == 302
    page = text_of(client.get(FLEET_URL))
    assert "Imported 12 cells into the draft (revision 3)" in page
    v1 = selectors.version_table(version=selectors.version_get(fleet=draft_fleet, ref=1))
    draft = selectors.version_table(version=selectors.version_get(fleet=draft_fleet, ref="draft"))
    assert draft == v1


def test_import__pasted_document_without_draft__starts_one(
    client: Client, fleet: Fleet, editor: Any
) -> None:
    # Given a fleet without a draft, and v1's document
    as_user(client, editor)
    document = selectors.version_document(version=selectors.version_get(fleet=fleet, ref=1))
    document["cells"][0]["threshold"] = 0.42

    # When the editor pastes it
    response = client.post(
        f"{FLEET_URL}draft/import/", {"revision": "", "document_text": json.dumps(document)}
    )

    # Then a draft exists with the pasted table
    assert response.status_code == 302
    assert cell_values(fleet, ("voice", "interactive", "sensitive"))["threshold"] == 0.42


def test_import__invalid_json__clear_error_and_nothing_imported(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they paste text that is not JSON
    response = client.post(
        f"{FLEET_URL}draft/import/", {"revision": "1", "document_text": '{"cells": [1, 2,'}
    )

    # Then they are told it is not valid JSON and where, and their text is kept
    page = text_of(response)
    assert response.status_code == 400
    assert "The pasted text is not valid JSON" in page
    assert "line 1" in page
    assert "Nothing was imported" in page
    assert selectors.draft_get(fleet=draft_fleet).revision == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"cells": ' + "[" * 1000 + "]" * 1000 + "}", "levels deep"),
        ('{"fleet": "fleet-a\\u0000", "cells": []}', "NUL"),
        ('{"cells": [{"threshold": NaN}]}', "finite"),
    ],
    ids=["nested-1000-deep", "nul", "nan"],
)
def test_import__hostile_document__refused_naming_the_field_nothing_imported(
    client: Client, draft_fleet: Fleet, editor: Any, text: str, says: str
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they paste a document nested 1,000 deep, with a NUL, or with NaN
    response = client.post(f"{FLEET_URL}draft/import/", {"revision": "1", "document_text": text})

    # Then the page says what is wrong and nothing is imported (never a 500)
    page = text_of(response)
    assert response.status_code == 400
    assert says in page
    assert "Nothing was imported" in page
    assert selectors.draft_get(fleet=draft_fleet).revision == 1  # type: ignore[union-attr]


def test_import__invalid_cells__problems_per_cell_and_field(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given a document with a θ out of range and a contradictory sensitive cell
    as_user(client, editor)
    document = selectors.version_document(version=selectors.version_get(fleet=draft_fleet, ref=1))
    document["cells"][1]["threshold"] = 7
    document["cells"][0]["mode"] = "cloud_only"

    # When it is uploaded
    response = client.post(
        f"{FLEET_URL}draft/import/",
        {
            "revision": "1",
            "document_file": SimpleUploadedFile("bad.json", json.dumps(document).encode()),
        },
    )

    # Then each problem names its cell and field, and nothing is imported
    page = text_of(response)
    assert response.status_code == 400
    assert "voice/interactive/normal" in page
    assert "must be in [0, 1]; got 7" in page
    assert "voice/interactive/sensitive" in page
    assert "cloud_only contradicts" in page
    assert cell_values(draft_fleet, ("voice", "interactive", "normal"))["threshold"] == 0.65


def test_import__file_over_limit__refused(client: Client, draft_fleet: Fleet, editor: Any) -> None:
    # Given a request size limit of 2 KiB
    as_user(client, editor)
    big = json.dumps({"cells": [], "padding": "x" * 4096}).encode()

    with override_settings(MAX_REQUEST_BYTES=2048):
        # When a larger file is uploaded
        response = client.post(
            f"{FLEET_URL}draft/import/",
            {"revision": "1", "document_file": SimpleUploadedFile("big.json", big)},
        )

    # Then it is refused as too large and nothing is imported
    assert response.status_code == 413
    assert "limit" in text_of(response)
    assert selectors.draft_get(fleet=draft_fleet).revision == 1  # type: ignore[union-attr]


# --- versions, diff, audit --------------------------------------------------------------------


def test_versions_page__two_versions__compare_controls_and_start_draft(
    client: Client, fleet: Fleet, publisher: Any
) -> None:
    # Given v1 and v2
    draft_changed(fleet=fleet, actor=publisher)
    services.policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="second")
    as_user(client, publisher)

    # When the versions page is opened
    page = text_of(client.get(f"{FLEET_URL}versions/"))

    # Then both are listed with compare radios (v1 → v2 preselected) and draft buttons
    assert "second" in page
    assert 'name="a" value="1" form="compare-form" aria-label="Compare from v1" checked' in page
    assert 'name="b" value="2" form="compare-form" aria-label="Compare to v2" checked' in page
    assert "Start draft from v1" in page


def test_diff_page__changed_threshold__cell_and_field_highlighted(
    client: Client, draft_fleet: Fleet, publisher: Any
) -> None:
    # Given v2 differs from v1 in one θ
    services.policy_draft_update_cells(
        actor=publisher,
        fleet=draft_fleet,
        revision=1,
        edits=[
            {
                "task_type": "text",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.75},
            }
        ],
    )
    services.policy_version_publish(
        actor=publisher, fleet=draft_fleet, revision=2, note="Raise θ for text"
    )
    as_user(client, publisher)

    # When the diff v1 → v2 is opened
    page = text_of(client.get(f"{FLEET_URL}diff/?a=1&b=2"))

    # Then that cell is outlined in the grid with θ old → new, and listed in the table
    cell = cell_html(page, "text/interactive/normal")
    assert "changed" in cell
    assert '<span class="v theta hl">0.75</span>' in cell
    assert "<del>0.6</del> → <ins>0.75</ins>" in cell
    assert "changed" not in cell_html(page, "voice/interactive/normal").split('"')[1]
    assert re.search(
        r"text/interactive/normal</th>\s*<td>Threshold θ</td>\s*"
        r'<td class="before"><del>0.6</del></td>\s*<td class="after"><ins>0.75</ins></td>',
        page,
    )
    assert "1 cell differs" in page


def test_diff_page__defaults__latest_against_draft(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given a draft that added task type "code"
    services.policy_draft_add_dimension_value(
        actor=editor, fleet=draft_fleet, revision=1, dimension="task_type", value="code"
    )
    as_user(client, editor)

    # When the diff page is opened without choosing versions
    page = text_of(client.get(f"{FLEET_URL}diff/"))

    # Then it compares v1 with the draft and shows the added value and cells
    assert "From <strong>v1</strong> to <strong>draft</strong>" in page
    assert "+ code" in page
    assert "code/interactive/normal" in page
    assert "added" in page


def test_diff_page__unknown_version__404(client: Client, fleet: Fleet, viewer: Any) -> None:
    # Given a viewer
    as_user(client, viewer)

    # When they ask for a version that does not exist
    response = client.get(f"{FLEET_URL}diff/?a=1&b=9")

    # Then the page says there is no such version
    assert response.status_code == 404
    assert "no version" in text_of(response)


def test_audit_page__after_edit__lists_edit_with_before_and_after(
    client: Client, draft_fleet: Fleet, editor: Any, viewer: Any
) -> None:
    # Given an editor changed θ through the page
    as_user(client, editor)
    client.post(f"{FLEET_URL}draft/cells/", edit_form(1, [TEXT_NORMAL], threshold="0.66"))

    # When a viewer opens the audit log
    as_user(client, viewer)
    page = text_of(client.get(f"{FLEET_URL}audit/"))

    # Then the edit is listed first, by the editor, with θ before and after
    assert page.index("policy_cells.updated") < page.index("policy_draft.created")
    assert "Edited 1 cell(s): text/interactive/normal" in page
    assert re.search(
        r'<td class="cell-ref">text/interactive/normal</td><td>Threshold θ</td>'
        r'<td class="before"><del>0.6</del></td><td class="after"><ins>0.66</ins></td>',
        page,
    )
    assert ">editor<" in page


def test_versions_list__draft_row__marked_draft(
    client: Client, draft_fleet: Fleet, viewer: Any
) -> None:
    # Given a draft and v1
    as_user(client, viewer)

    # When the versions page is opened by a viewer
    page = text_of(client.get(f"{FLEET_URL}versions/"))

    # Then the draft is first, and no draft buttons are offered to a viewer
    assert page.index("draft · r1") < page.index(">v1<")
    assert "Start draft from" not in page
    assert PolicyVersion.objects.filter(fleet=draft_fleet).count() == 2


# --- what devices run, what changed, what a publish needs --------------------------------------


def _edit_text_normal(fleet: Fleet, actor: Any, revision: int = 1, **values: Any) -> None:
    services.policy_draft_update_cells(
        actor=actor,
        fleet=fleet,
        revision=revision,
        edits=[
            {
                **dict(
                    zip(("task_type", "latency_budget", "privacy_tier"), TEXT_NORMAL, strict=True)
                ),
                "values": values,
            }
        ],
    )


def test_publish__second_version__page_says_devices_still_run_v1_and_how_to_ship_v2(
    client: Client, draft_fleet: Fleet, publisher: Any
) -> None:
    # Given a draft with one change on a fleet whose devices run v1
    _edit_text_normal(draft_fleet, publisher, threshold=0.7)
    as_user(client, publisher)

    # When the publisher publishes it
    response = client.post(
        f"{FLEET_URL}draft/publish/", {"revision": "2", "note": "Raise θ for text"}, follow=True
    )

    # Then the page does not pretend v2 is live: devices run v1, v2 runs on no device, and the
    # next step (a rollout or a switch) links to the rollout page
    page = text_of(response)
    assert "Published v2. Devices still run v1: no device runs v2 until" in page
    assert "receive it next" not in page
    assert 'data-version-running="idle">runs on no device<' in page
    runs = re.search(r"<p data-runs>(.*?)</p>", page, re.S)
    assert runs is not None
    assert re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", runs.group(1))).strip() == (
        "Devices run v1 (stable): every device."
    )
    next_step = re.search(r"<p data-next-step>(.*?)</p>", page, re.S)
    assert next_step is not None
    assert "v2 is published but runs on no device yet." in next_step.group(1)
    assert f'<a href="{FLEET_URL}rollout/">Start a rollout of v2</a>' in next_step.group(1)
    assert f'<a href="{FLEET_URL}rollout/">switch every device to it</a>' in next_step.group(1)


def test_fleet_page__rollout_open__says_both_versions_with_shares_and_next_stage(
    client: Client, draft_fleet: Fleet, publisher: Any, viewer: Any
) -> None:
    # Given v2 rolled out to 5% over v1
    _edit_text_normal(draft_fleet, publisher, threshold=0.7)
    services.policy_version_publish(actor=publisher, fleet=draft_fleet, revision=2, note="θ up")
    services.rollout_start(actor=publisher, fleet=draft_fleet, version=2)

    # When a viewer opens v2 on the fleet page
    page = text_of(as_user(client, viewer).get(f"{FLEET_URL}?version=2"))

    # Then it says v1 runs on 95% and v2 on 5%, v2 is the candidate, and a publisher advances it
    runs = re.search(r"<p data-runs>(.*?)</p>", page, re.S)
    assert runs is not None
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", runs.group(1))).strip()
    assert text == (
        "Devices run v1 (stable) on 95% of devices and v2 (candidate) on 5%: "
        "a rollout is under way."
    )
    assert 'data-version-running="candidate">candidate: 5% of devices run it<' in page
    assert "A publisher can advance to 25% (or roll back)" in page


def test_fleet_page__first_publish__every_device_runs_it(
    client: Client, publisher: Any, db: None
) -> None:
    # Given a new fleet whose first draft was never published
    as_user(client, publisher)
    client.post("/fleets/new/", {"slug": "car", "name": "Car", "description": ""})

    # When the publisher publishes it as v1
    page = text_of(
        client.post("/fleets/car/draft/publish/", {"revision": "1", "note": "first"}, follow=True)
    )

    # Then the page says every device runs it, with nothing left to ship
    assert (
        "Published v1. It is the fleet&#x27;s first version, so every device runs it now." in page
    )
    assert 'data-version-running="stable">stable: devices run it<' in page
    assert "Nothing to ship: every device runs the latest version." in page


def test_fleet_page__draft_with_changes__changed_and_new_cells_marked_with_count_and_diff_link(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given a draft from v1 with θ changed on one cell and a task type "code" added (4 new cells)
    _edit_text_normal(draft_fleet, editor, threshold=0.7)
    services.policy_draft_add_dimension_value(
        actor=editor, fleet=draft_fleet, revision=2, dimension="task_type", value="code"
    )

    # When the editor opens the draft
    page = text_of(as_user(client, editor).get(FLEET_URL))

    # Then the changed cell is marked "changed" in words, its θ highlighted with old → new,
    # the four new cells say "new cell", the others carry no mark, and a legend explains them
    changed = cell_html(page, "text/interactive/normal")
    assert "changed" in changed.split('"')[1]
    assert '<span class="mark-tag mark-changed">changed</span>' in changed
    assert '<span class="v theta hl">0.7</span>' in changed
    assert "<del>0.6</del> → <ins>0.7</ins>" in changed
    for tier in ("sensitive", "normal"):
        for budget in ("interactive", "background"):
            assert '<span class="mark-tag mark-added">new cell</span>' in cell_html(
                page, f"code/{budget}/{tier}"
            )
    assert "mark-tag" not in cell_html(page, "voice/interactive/normal")
    assert "differs from v1" in page
    assert "not in v1" in page
    # ... and beside Publish, the count links to the draft's diff against v1
    assert (
        f'<a href="{FLEET_URL}diff/?a=1&amp;b=draft">5 cells changed since v1</a>'
        in page.replace("&b=", "&amp;b=")
    )
    assert "Publishing changes no device: they keep running what they run now" in page


def test_fleet_page__draft_equal_to_base__no_marks_and_zero_changes(
    client: Client, draft_fleet: Fleet, publisher: Any
) -> None:
    # Given a draft just started from v1
    # When the publisher opens it
    page = text_of(as_user(client, publisher).get(FLEET_URL))

    # Then no cell is marked, and Publish is off: there is nothing to publish (issue 22: it
    # used to say "0 cells changed since v1" beside an enabled Publish)
    assert "mark-tag mark-" not in page.split('id="matrix"')[1]
    assert "Nothing to publish: this draft is identical to v1, the version it started from." in (
        page
    )
    assert 'class="btn btn-publish" disabled' in page


@pytest.mark.parametrize("note", ["", "   ", "\t\n"])
def test_publish__blank_note__400_naming_the_note_and_still_a_draft(
    client: Client, draft_fleet: Fleet, publisher: Any, note: str
) -> None:
    # Given a publisher on a draft
    as_user(client, publisher)

    # When they publish with an empty or whitespace-only release note
    response = client.post(f"{FLEET_URL}draft/publish/", {"revision": "1", "note": note})

    # Then it is refused, naming the note, and nothing is published
    page = text_of(response)
    assert response.status_code == 400
    assert "The release note: must not be empty" in page
    assert "Release note: must not be empty" in page
    assert selectors.latest_published(fleet=draft_fleet).number == 1  # type: ignore[union-attr]
    assert selectors.draft_get(fleet=draft_fleet) is not None


def test_fleet_page__publish_form__note_required_in_the_browser(
    client: Client, draft_fleet: Fleet, publisher: Any
) -> None:
    # Given a publisher on a draft
    # When they open it
    page = text_of(as_user(client, publisher).get(FLEET_URL))

    # Then the note field is required (and must hold more than spaces) before the form is sent
    field = re.search(r'<input type="text" id="publish-note"[^>]*>', page)
    assert field is not None
    assert " required" in field.group(0)
    assert 'pattern=".*\\S.*"' in field.group(0)
    assert "Release note (required)" in field.group(0)


def test_fleet_page__pinned_modes__theta_marked_not_used(
    client: Client, draft_fleet: Fleet, viewer: Any
) -> None:
    # Given the seed table: voice/interactive/sensitive is device_only, image/background/normal
    # cloud_only, text/interactive/normal auto
    # When a viewer opens the grid
    page = text_of(as_user(client, viewer).get(FLEET_URL))

    # Then θ reads "not used" on the pinned cells and as a number where it decides
    for label in ("voice/interactive/sensitive", "image/background/normal"):
        cell = cell_html(page, label)
        assert 'class="v theta' not in cell
        assert '<span class="na">not used</span>' in cell
    assert theta_shown(page, "text/interactive/normal") == "0.6"


def test_cell_edit__refused__fleet_url_given_to_the_script_and_cell_kept_selected(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor
    as_user(client, editor)

    # When a save is refused
    response = client.post(f"{FLEET_URL}draft/cells/", edit_form(1, [TEXT_NORMAL], threshold="2"))

    # Then the page keeps the cell selected and tells the editor script the fleet page's address
    # (it puts it back in the address bar)
    page = text_of(response)
    assert response.status_code == 400
    assert "selected" in cell_html(page, "text/interactive/normal").split('"')[1]
    assert f'data-fleet-url="{FLEET_URL}"' in page


def test_edit_panel__number_fields__carry_label_and_range_for_the_browser_check(
    client: Client, draft_fleet: Fleet, editor: Any
) -> None:
    # Given an editor on the draft
    # When they open it
    page = text_of(as_user(client, editor).get(FLEET_URL))

    # Then θ's field names itself and its range, so the browser can refuse "abc" or 1.5
    field = re.search(r'<input [^>]*id="field-threshold"[^>]*>', page)
    assert field is not None
    for attribute in ('data-label="Threshold θ"', 'data-min="0.0"', 'data-max="1.0"'):
        assert attribute in field.group(0)


@pytest.mark.parametrize(
    ("role", "refusal"),
    [(Role.EDITOR, "You are an editor."), (Role.VIEWER, "You are a viewer.")],
)
def test_publish__below_publisher__refusal_uses_the_right_article(
    client: Client, draft_fleet: Fleet, make_user: Any, role: Role, refusal: str
) -> None:
    # Given a user below the publisher role
    as_user(client, make_user(role, username="someone"))

    # When they post the publish form
    response = client.post(f"{FLEET_URL}draft/publish/", {"revision": "1", "note": "go"})

    # Then the refusal names their role with the right article
    assert response.status_code == 403
    assert refusal in text_of(response)
    assert "a editor" not in text_of(response)


@pytest.mark.parametrize(
    ("pasted", "position"),
    [
        ('{"cells" 1}', "Expecting &#x27;:&#x27; delimiter at line 1, column 10 (character 10)"),
        ('{"a": 1,\n "b" 2}', "Expecting &#x27;:&#x27; delimiter at line 2, column 6"),
        ("[1, 2", "at line 1, column 6 (character 6)"),
    ],
)
def test_import__invalid_json_mentioning_delimiter__400_with_the_position(
    client: Client, draft_fleet: Fleet, editor: Any, pasted: str, position: str
) -> None:
    # Given an editor
    as_user(client, editor)

    # When they paste JSON whose parse error says "delimiter" (which once read as a size limit)
    response = client.post(f"{FLEET_URL}draft/import/", {"revision": "1", "document_text": pasted})

    # Then it is a 400 saying where the text breaks, and nothing is imported
    page = text_of(response)
    assert response.status_code == 400
    assert "The pasted text is not valid JSON" in page
    assert position in page
    assert selectors.draft_get(fleet=draft_fleet).revision == 1  # type: ignore[union-attr]


def test_fleet_list__rollout_open_and_newer_version__says_what_devices_run(
    client: Client, fleet: Fleet, publisher: Any, viewer: Any
) -> None:
    # Given v2 rolled out to 5% over v1, and v3 published but not rolled out
    for note in ("v2", "v3"):
        draft = draft_changed(fleet=fleet, actor=publisher)
        services.policy_version_publish(
            actor=publisher, fleet=fleet, revision=draft.revision, note=note
        )
    services.rollout_start(actor=publisher, fleet=fleet, version=2)

    # When a viewer opens the fleet list
    page = text_of(as_user(client, viewer).get("/"))

    # Then the fleet's row says v3 runs on no device, and that devices run v1 and v2 on 5%
    row = re.search(r'<span class="chip chip-published">v3</span>(.*?)</td>', page, re.S)
    assert row is not None
    assert '<div class="small idle-note" data-field="idle">on no device yet</div>' in row.group(1)
    assert '<div class="muted small" data-field="runs">devices run v1, v2 on 5%</div>' in row.group(
        1
    )
