"""Saving the edit panel without a new value says that nothing changed and why, in the words
the page uses (issue 22): never the internal `values` name, never "fill in at least one field"
while the field shows the cell's value. Nothing is stored."""

from typing import Any

import pytest
from django.test import Client

from routing_policies.models import AuditEntry, PolicyVersion
from routing_policies.services import policy_draft_create
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

CELLS_URL = "/fleets/fleet-a/draft/cells/"
CELL = "voice/interactive/normal"


def _draft_state(fleet: Any) -> tuple[int, int]:
    draft = PolicyVersion.objects.get(fleet=fleet, published_at__isnull=True)
    return draft.revision, AuditEntry.objects.count()


def _theta(fleet: Any) -> float:
    draft = PolicyVersion.objects.get(fleet=fleet, published_at__isnull=True)
    cell = draft.cells.get(task_type="voice", latency_budget="interactive", privacy_tier="normal")
    return float(cell.threshold)


@pytest.fixture
def editing(fleet: Any, editor: Any, client: Client) -> Client:
    """An editor logged in, on a draft just started from v1 (revision 1)."""
    policy_draft_create(actor=editor, fleet=fleet)
    client.login(username=editor.username, password=PASSWORD)
    return client


def test_cell_edit_page__no_field_given_a_value__says_nothing_changed_in_words(
    fleet: Any, editing: Client
) -> None:
    # Given an editor with one cell selected
    before = _draft_state(fleet)

    # When they save with every field left as the cell has it (the editor sends them blank)
    response = editing.post(CELLS_URL, {"revision": "1", "cell": CELL}, follow=True)

    # Then the page says nothing changed and why, without an internal name or an error
    text = response.content.decode()
    assert response.status_code == 200
    assert (
        f"Nothing changed: no field of {CELL} was given a new value, so there was nothing to save."
        in text
    )
    assert "fill in at least one field" not in text
    assert "values:" not in text
    assert "Nothing was saved" not in text
    # And the cell stays selected, and nothing is stored
    assert response.redirect_chain[-1][0].endswith(f"?cell={CELL}")
    assert _draft_state(fleet) == before


def test_cell_edit_page__value_equal_to_the_current_one__says_it_already_had_it(
    fleet: Any, editing: Client
) -> None:
    # Given an editor with one cell selected, whose θ the panel shows
    theta = _theta(fleet)
    before = _draft_state(fleet)

    # When they type the same θ again and save
    response = editing.post(
        CELLS_URL, {"revision": "1", "cell": CELL, "value-threshold": str(theta)}, follow=True
    )

    # Then the page names the field and the value the cell already had
    text = response.content.decode()
    assert f"Nothing changed: {CELL} already had Threshold θ {theta:g}, so there was" in text
    assert "values:" not in text
    assert _draft_state(fleet) == before


def test_cell_bulk_edit_page__values_equal_on_every_cell__says_they_already_had_them(
    fleet: Any, editing: Client
) -> None:
    # Given an editor, and two cells whose cloud timeout they set to 1500 ms (revision 2)
    two = [CELL, "voice/interactive/sensitive"]
    editing.post(
        CELLS_URL, {"revision": "1", "cell": two, "value-cloud_timeout_ms": "1500"}, follow=True
    )
    before = _draft_state(fleet)
    assert before[0] == 2

    # When they set the same cloud timeout on both again
    response = editing.post(
        CELLS_URL, {"revision": "2", "cell": two, "value-cloud_timeout_ms": "1500"}, follow=True
    )

    # Then the page says both already had it, and nothing is stored
    text = response.content.decode()
    assert (
        f"Nothing changed: {CELL}, voice/interactive/sensitive already had Cloud timeout (ms) "
        "1500, so there was nothing to save." in text
    )
    assert _draft_state(fleet) == before


def test_cell_edit_page__no_cell_selected__400_names_the_cell(fleet: Any, editing: Client) -> None:
    # Given an editor / When they save with no cell selected (a crafted post)
    before = _draft_state(fleet)
    response = editing.post(CELLS_URL, {"revision": "1", "value-threshold": "0.5"})

    # Then 400 asks for a cell, and nothing is stored
    assert response.status_code == 400
    assert "select at least one cell in the grid to change" in response.content.decode()
    assert _draft_state(fleet) == before
