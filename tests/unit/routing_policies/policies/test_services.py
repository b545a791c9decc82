"""Writes to fleets and policy versions: drafts, edits, dimensions, import, publish, audit."""

import math
from typing import Any

import pytest

from controlplane.exceptions import Conflict, ValidationFailed
from routing_policies.cell_schema import CELL_FIELDS, SEED_DIMENSIONS
from routing_policies.demo import demo_table
from routing_policies.documents import build_document
from routing_policies.models import AuditEntry, PolicyVersion
from routing_policies.selectors import draft_get, version_get, version_table
from routing_policies.services import (
    fleet_create,
    policy_draft_add_dimension_value,
    policy_draft_create,
    policy_draft_import,
    policy_draft_remove_dimension_value,
    policy_draft_update_cells,
    policy_version_publish,
)

pytestmark = pytest.mark.django_db

VOICE_NORMAL = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}
TEXT_NORMAL = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}
NUMERIC_FIELDS = [spec.path for spec in CELL_FIELDS if spec.kind in ("int", "float")]


def _edit(key: dict[str, str], **values: Any) -> dict[str, Any]:
    return {**key, "values": {path.replace("__", "."): v for path, v in values.items()}}


def _cell(task_type: str, latency_budget: str, privacy_tier: str) -> dict[str, str]:
    return {"task_type": task_type, "latency_budget": latency_budget, "privacy_tier": privacy_tier}


def _numbers(fleet: Any) -> list[int]:
    return sorted(
        PolicyVersion.objects.filter(fleet=fleet, number__isnull=False).values_list(
            "number", flat=True
        )
    )


def _publish_change(fleet: Any, actor: Any, threshold: float) -> PolicyVersion:
    """Draft from the latest version, change voice/interactive/normal θ, publish."""
    draft = policy_draft_create(actor=actor, fleet=fleet)
    policy_draft_update_cells(
        actor=actor,
        fleet=fleet,
        revision=draft.revision,
        edits=[_edit(VOICE_NORMAL, threshold=threshold)],
    )
    return policy_version_publish(actor=actor, fleet=fleet, revision=2, note=f"θ {threshold}")


@pytest.fixture
def draft(fleet: Any, editor: Any) -> PolicyVersion:
    """A draft of `fleet` (v1 published) at revision 1, started by `editor`."""
    return policy_draft_create(actor=editor, fleet=fleet)


# --- drafts --------------------------------------------------------------------------------


def test_policy_draft_create__default__copies_latest_published_version(
    fleet: Any, publisher: Any
) -> None:
    # Given a fleet whose v2 raised one θ over v1
    v2 = _publish_change(fleet, publisher, 0.7)

    # When a draft is started without naming a version
    draft = policy_draft_create(actor=publisher, fleet=fleet)

    # Then it is a copy of v2 at revision 1
    assert draft.based_on == v2
    assert draft.revision == 1
    assert version_table(version=draft) == version_table(version=v2)
    assert version_table(version=draft)[("voice", "interactive", "normal")]["threshold"] == 0.7


def test_policy_draft_create__chosen_version__copies_that_version(
    fleet: Any, publisher: Any
) -> None:
    # Given a fleet with v1 and a changed v2
    _publish_change(fleet, publisher, 0.7)

    # When a draft is started from v1
    draft = policy_draft_create(actor=publisher, fleet=fleet, from_number=1)

    # Then it holds v1's table (θ 0.65), e.g. to roll a bad change back in a new version
    assert draft.based_on == version_get(fleet=fleet, ref=1)
    assert version_table(version=draft) == demo_table()


def test_policy_draft_create__unknown_version__refused(fleet: Any, editor: Any) -> None:
    # Given a fleet with only v1
    # When a draft is asked for from v9
    with pytest.raises(ValidationFailed) as refused:
        policy_draft_create(actor=editor, fleet=fleet, from_number=9)

    # Then it is refused naming the version and no draft exists
    assert "no published version 9" in refused.value.message
    assert draft_get(fleet=fleet) is None


def test_policy_draft_create__draft_exists__conflict_draft_exists(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a fleet that already has a draft
    # When a second draft is asked for
    with pytest.raises(Conflict) as refused:
        policy_draft_create(actor=editor, fleet=fleet)

    # Then it is refused with 409 draft_exists, and still exactly one draft exists
    assert (refused.value.status_code, refused.value.code) == (409, "draft_exists")
    assert PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).count() == 1


# --- publish -------------------------------------------------------------------------------


def test_policy_version_publish__three_times__numbers_1_2_3(publisher: Any) -> None:
    # Given a new fleet with a draft
    fleet = fleet_create(actor=publisher, slug="fleet-new", name="New", table=demo_table())

    # When it is published, then drafted and published twice more
    first = policy_version_publish(actor=publisher, fleet=fleet, revision=1, note="next")
    second = _publish_change(fleet, publisher, 0.7)
    third = _publish_change(fleet, publisher, 0.75)

    # Then the versions are numbered 1, 2, 3 and no draft is left
    assert [first.number, second.number, third.number] == [1, 2, 3]
    assert _numbers(fleet) == [1, 2, 3]
    assert draft_get(fleet=fleet) is None


def test_policy_version_publish__note__stored_with_publisher_and_etag(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    # Given a draft with one θ changed (a draft identical to v1 is not published)
    policy_draft_update_cells(
        actor=publisher, fleet=fleet, revision=1, edits=[_edit(TEXT_NORMAL, threshold=0.7)]
    )
    # When it is published with a note padded by spaces
    version = policy_version_publish(
        actor=publisher, fleet=fleet, revision=2, note="  Raise θ for long prompts  "
    )

    # Then the note is trimmed and the publisher, time and ETag are recorded
    version.refresh_from_db()
    assert version.note == "Raise θ for long prompts"
    assert version.published_by == publisher
    assert version.published_at is not None
    assert version.etag.startswith('"v2-')


def test_policy_version_publish__then_edit__conflict_no_draft_and_version_unchanged(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    # Given a draft published as v2 (with text/interactive/normal's θ changed)
    policy_draft_update_cells(
        actor=publisher, fleet=fleet, revision=1, edits=[_edit(TEXT_NORMAL, threshold=0.7)]
    )
    version = policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")
    cells_before = version_table(version=version)

    # When someone edits with the revision they loaded before the publish
    with pytest.raises(Conflict) as refused:
        policy_draft_update_cells(
            actor=publisher, fleet=fleet, revision=1, edits=[_edit(VOICE_NORMAL, threshold=0.9)]
        )

    # Then the edit is refused (409 no_draft) and v2's cells are untouched
    assert (refused.value.status_code, refused.value.code) == (409, "no_draft")
    assert version_table(version=version) == cells_before
    assert cells_before[("voice", "interactive", "normal")]["threshold"] == 0.65


def test_policy_draft_update_cells__after_new_draft__published_versions_untouched(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft copied from v1
    # When the draft's cells are edited
    policy_draft_update_cells(
        actor=editor, fleet=fleet, revision=1, edits=[_edit(VOICE_NORMAL, threshold=0.9)]
    )

    # Then v1 still holds its own value: the draft is a copy, not a view
    v1_table = version_table(version=version_get(fleet=fleet, ref=1))
    assert v1_table[("voice", "interactive", "normal")]["threshold"] == 0.65
    assert version_table(version=draft)[("voice", "interactive", "normal")]["threshold"] == 0.9


@pytest.mark.parametrize("note", ["", "   ", "\n\t"])
def test_policy_version_publish__blank_note__refused_naming_note_and_still_a_draft(
    fleet: Any, publisher: Any, draft: PolicyVersion, note: str
) -> None:
    # Given a draft
    # When it is published without a release note
    with pytest.raises(ValidationFailed) as refused:
        policy_version_publish(actor=publisher, fleet=fleet, revision=1, note=note)

    # Then the service refuses it (for the page and the API alike), naming the note
    assert [problem["field"] for problem in refused.value.details] == ["note"]
    assert draft_get(fleet=fleet) is not None
    assert _numbers(fleet) == [1]


def test_policy_version_publish__same_revision_twice__second_conflict(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    # Given a draft with one θ changed, published once
    policy_draft_update_cells(
        actor=publisher, fleet=fleet, revision=1, edits=[_edit(TEXT_NORMAL, threshold=0.7)]
    )
    policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")

    # When the same revision is published again (a double click)
    with pytest.raises(Conflict) as refused:
        policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")

    # Then the second is refused and there is no v3
    assert refused.value.status_code == 409
    assert _numbers(fleet) == [1, 2]


# --- edits ---------------------------------------------------------------------------------


def test_policy_draft_update_cells__stale_revision__conflict_and_nothing_saved(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft someone moved to revision 2
    policy_draft_update_cells(
        actor=editor, fleet=fleet, revision=1, edits=[_edit(VOICE_NORMAL, threshold=0.7)]
    )

    # When another editor saves with revision 1
    with pytest.raises(Conflict) as refused:
        policy_draft_update_cells(
            actor=editor,
            fleet=fleet,
            revision=1,
            edits=[_edit(VOICE_NORMAL, threshold=0.9, cache_ttl_s=60)],
        )

    # Then 409 stale_revision says the draft changed, and the first edit stands alone
    assert (refused.value.status_code, refused.value.code) == (409, "stale_revision")
    assert "changed" in refused.value.message
    draft.refresh_from_db()
    assert draft.revision == 2
    cell = version_table(version=draft)[("voice", "interactive", "normal")]
    assert (cell["threshold"], cell["cache_ttl_s"]) == (0.7, 600)


def test_policy_draft_update_cells__several_valid_cells__all_saved_one_revision(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft at revision 1
    # When two cells are changed in one edit (weights nested as in the document)
    policy_draft_update_cells(
        actor=editor,
        fleet=fleet,
        revision=1,
        edits=[
            _edit(VOICE_NORMAL, threshold=0.7),
            _edit(
                _cell("text", "background", "normal"),
                weights__length=0.5,
                weights__intent=0.25,
                weights__lm=0.25,
            ),
        ],
    )

    # Then both are saved and the revision moves by one
    draft.refresh_from_db()
    table = version_table(version=draft)
    assert draft.revision == 2
    assert table[("voice", "interactive", "normal")]["threshold"] == 0.7
    assert table[("text", "background", "normal")]["weights.length"] == 0.5


def test_policy_draft_update_cells__one_invalid_cell__nothing_saved_each_bad_cell_named(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft at revision 1
    # When one good and two bad cells are edited together
    with pytest.raises(ValidationFailed) as refused:
        policy_draft_update_cells(
            actor=editor,
            fleet=fleet,
            revision=1,
            edits=[
                _edit(VOICE_NORMAL, threshold=0.7),
                _edit(_cell("text", "interactive", "normal"), threshold=1.5),
                _edit(_cell("image", "background", "normal"), weights__lm=0.9),
            ],
        )

    # Then each bad cell and field is named, and not even the good change is saved
    assert {(d["cell"], d["field"]) for d in refused.value.details} == {
        ("text/interactive/normal", "threshold"),
        ("image/background/normal", "weights"),
    }
    assert "nothing was saved" in refused.value.message
    draft.refresh_from_db()
    assert draft.revision == 1
    assert version_table(version=draft) == demo_table()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "0.5", None])
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_policy_draft_update_cells__non_number__refused_naming_field_and_not_stored(
    fleet: Any, editor: Any, draft: PolicyVersion, field: str, bad: Any
) -> None:
    # Given a draft at revision 1
    # When a numeric field is set to NaN, an infinity, a boolean, a string or null
    with pytest.raises(ValidationFailed) as refused:
        policy_draft_update_cells(
            actor=editor, fleet=fleet, revision=1, edits=[_edit(VOICE_NORMAL, **{field: bad})]
        )

    # Then the error names the cell and field, and the stored cell keeps its value
    assert ("voice/interactive/normal", field) in {
        (d["cell"], d["field"]) for d in refused.value.details
    }
    assert version_table(version=draft) == demo_table()


def test_policy_draft_update_cells__same_cell_twice__refused_naming_cell(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft
    # When one request edits the same cell twice
    with pytest.raises(ValidationFailed) as refused:
        policy_draft_update_cells(
            actor=editor,
            fleet=fleet,
            revision=1,
            edits=[_edit(VOICE_NORMAL, threshold=0.7), _edit(VOICE_NORMAL, threshold=0.8)],
        )

    # Then it is refused naming that cell (which value should win is not guessed)
    assert [(d["cell"], d["field"]) for d in refused.value.details] == [
        ("voice/interactive/normal", "cell")
    ]
    assert version_table(version=draft) == demo_table()


def test_policy_draft_update_cells__cell_not_in_table__refused_naming_cell(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft without task type `code`
    # When a `code` cell is edited
    with pytest.raises(ValidationFailed) as refused:
        policy_draft_update_cells(
            actor=editor,
            fleet=fleet,
            revision=1,
            edits=[_edit(_cell("code", "interactive", "normal"), threshold=0.7)],
        )

    # Then the cell is named as not part of the table
    assert refused.value.details[0]["cell"] == "code/interactive/normal"


# --- dimensions ----------------------------------------------------------------------------


def test_policy_draft_add_dimension_value__code__adds_four_copied_cells_and_stays_publishable(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    # Given a 12-cell draft
    # When task type `code` is added as a copy of `text`
    policy_draft_add_dimension_value(
        actor=publisher,
        fleet=fleet,
        revision=1,
        dimension="task_type",
        value="code",
        copy_from="text",
    )

    # Then exactly the 4 implied cells exist, each equal to its `text` sibling
    draft.refresh_from_db()
    table = version_table(version=draft)
    assert draft.dimensions["task_type"] == ["voice", "text", "image", "code"]
    assert len(table) == 16
    new_keys = {key for key in table if key[0] == "code"}
    assert new_keys == {
        ("code", budget, tier)
        for budget in SEED_DIMENSIONS["latency_budget"]
        for tier in SEED_DIMENSIONS["privacy_tier"]
    }
    for _, budget, tier in new_keys:
        assert table[("code", budget, tier)] == table[("text", budget, tier)]
    # and the table can be published as it is
    version = policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="code")
    assert len(version_table(version=version)) == 16


def test_policy_draft_add_dimension_value__no_source__copies_first_value(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft whose first privacy tier is `sensitive`
    # When tier `internal` is added without saying what to copy
    policy_draft_add_dimension_value(
        actor=editor, fleet=fleet, revision=1, dimension="privacy_tier", value="internal"
    )

    # Then its 6 cells copy the `sensitive` cells (the safe choice: voiceprints stay local)
    table = version_table(version=draft)
    internal = {key: values for key, values in table.items() if key[2] == "internal"}
    assert len(internal) == 6
    for (task, budget, _), values in internal.items():
        assert values == table[(task, budget, "sensitive")]


def test_policy_draft_add_dimension_value__existing_value__conflict(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft with task type `voice`
    # When `voice` is added again
    with pytest.raises(Conflict) as refused:
        policy_draft_add_dimension_value(
            actor=editor, fleet=fleet, revision=1, dimension="task_type", value="voice"
        )

    # Then 409, and the draft keeps its 12 cells at revision 1
    assert refused.value.status_code == 409
    draft.refresh_from_db()
    assert (draft.revision, len(version_table(version=draft))) == (1, 12)


def test_policy_draft_remove_dimension_value__image__removes_its_cells(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    # Given a 12-cell draft
    # When task type `image` is removed
    policy_draft_remove_dimension_value(
        actor=publisher, fleet=fleet, revision=1, dimension="task_type", value="image"
    )

    # Then its 4 cells are gone, the rest untouched, and the table is publishable
    draft.refresh_from_db()
    table = version_table(version=draft)
    assert draft.dimensions["task_type"] == ["voice", "text"]
    assert table == {k: v for k, v in demo_table().items() if k[0] != "image"}
    version = policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="next")
    assert len(version_table(version=version)) == 8


def test_policy_draft_remove_dimension_value__last_value__refused(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft reduced to one latency budget
    policy_draft_remove_dimension_value(
        actor=editor, fleet=fleet, revision=1, dimension="latency_budget", value="background"
    )

    # When the last one is removed too
    with pytest.raises(ValidationFailed):
        policy_draft_remove_dimension_value(
            actor=editor, fleet=fleet, revision=2, dimension="latency_budget", value="interactive"
        )

    # Then the table keeps its 6 interactive cells
    assert len(version_table(version=draft)) == 6


# --- import --------------------------------------------------------------------------------


def _document(table: dict[Any, dict[str, Any]], dimensions: dict[str, list[str]]) -> Any:
    return build_document(
        fleet_slug="fleet-a", number=None, published_at=None, dimensions=dimensions, table=table
    )


def test_policy_draft_import__valid_document__replaces_the_table(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a draft and a document with voice and text only, one θ changed
    dimensions = {
        **{k: list(v) for k, v in SEED_DIMENSIONS.items()},
        "task_type": ["voice", "text"],
    }
    table = {k: v for k, v in demo_table().items() if k[0] != "image"}
    table[("voice", "interactive", "normal")]["threshold"] = 0.7

    # When it is imported
    policy_draft_import(
        actor=editor, fleet=fleet, document=_document(table, dimensions), revision=1
    )

    # Then the draft holds exactly the document's table, at the next revision
    draft.refresh_from_db()
    assert draft.dimensions == dimensions
    assert version_table(version=draft) == table
    assert draft.revision == 2


def test_policy_draft_import__invalid_document__nothing_imported(
    fleet: Any, editor: Any, draft: PolicyVersion
) -> None:
    # Given a document whose voice/interactive/normal cell is listed twice
    document = _document(demo_table(), {k: list(v) for k, v in SEED_DIMENSIONS.items()})
    document["cells"].append(document["cells"][1])
    document["cells"][0]["threshold"] = 0.1

    # When it is imported
    with pytest.raises(ValidationFailed) as refused:
        policy_draft_import(actor=editor, fleet=fleet, document=document, revision=1)

    # Then the duplicate is named and the draft keeps its table
    assert {(d.get("cell"), d["field"]) for d in refused.value.details} == {
        ("voice/interactive/normal", "cell")
    }
    assert version_table(version=draft) == demo_table()


def test_policy_draft_import__no_draft__creates_one(fleet: Any, editor: Any) -> None:
    # Given a fleet with v1 and no draft
    table = demo_table()
    table[("voice", "interactive", "normal")]["threshold"] = 0.7

    # When a document is imported (no revision: there is no draft to be stale against)
    draft = policy_draft_import(
        actor=editor,
        fleet=fleet,
        document=_document(table, {k: list(v) for k, v in SEED_DIMENSIONS.items()}),
    )

    # Then a draft holding it exists
    assert draft_get(fleet=fleet) == draft
    assert version_table(version=draft) == table


# --- audit ---------------------------------------------------------------------------------


def _entries(fleet: Any, action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(fleet=fleet, action=action))


def _changes(entry: AuditEntry) -> dict[str, tuple[Any, Any]]:
    return {d["field"]: (d["before"], d["after"]) for d in entry.diff}


def test_audit__create_edit_dimension_import_publish__each_recorded_with_actor_time_diff(
    fleet: Any, editor: Any, publisher: Any
) -> None:
    # Given the demo fleet published as v1 (created and published by the publisher)
    voice_normal_threshold = "voice/interactive/normal.threshold"

    # When an editor starts a draft, raises θ 0.65 → 0.7, adds task type code, imports a
    # document with θ 0.75, and a publisher publishes it
    policy_draft_create(actor=editor, fleet=fleet)
    policy_draft_update_cells(
        actor=editor, fleet=fleet, revision=1, edits=[_edit(VOICE_NORMAL, threshold=0.7)]
    )
    policy_draft_add_dimension_value(
        actor=editor, fleet=fleet, revision=2, dimension="task_type", value="code"
    )
    imported = demo_table()
    imported[("voice", "interactive", "normal")]["threshold"] = 0.75
    policy_draft_import(
        actor=editor,
        fleet=fleet,
        document=_document(imported, {k: list(v) for k, v in SEED_DIMENSIONS.items()}),
        revision=3,
    )
    policy_version_publish(actor=publisher, fleet=fleet, revision=4, note="θ up")

    # Then each step has an entry with its actor and time
    expected_actors = {
        "fleet.created": "publisher",
        "policy_version.published": "publisher",
        "policy_draft.created": "editor",
        "policy_cells.updated": "editor",
        "policy_dimension.value_added": "editor",
        "policy_draft.imported": "editor",
    }
    for action, actor in expected_actors.items():
        entries = _entries(fleet, action)
        assert entries, action
        assert all(e.actor_name == actor and e.created_at is not None for e in entries), action
    # and the edit, import and publish diffs name the cell field with its before and after
    (edit,) = _entries(fleet, "policy_cells.updated")
    assert _changes(edit) == {voice_normal_threshold: (0.65, 0.7)}
    assert edit.before == {voice_normal_threshold: 0.65}
    assert edit.after == {voice_normal_threshold: 0.7}
    (imported_entry,) = _entries(fleet, "policy_draft.imported")
    assert _changes(imported_entry)[voice_normal_threshold] == (0.7, 0.75)
    assert "code/interactive/normal.threshold" in _changes(imported_entry)  # code removed again
    published = next(
        e for e in _entries(fleet, "policy_version.published") if e.target == "fleet-a v2"
    )
    assert _changes(published) == {voice_normal_threshold: (0.65, 0.75)}
    (added,) = _entries(fleet, "policy_dimension.value_added")
    assert _changes(added) == {
        "dimensions.task_type": (["voice", "text", "image"], ["voice", "text", "image", "code"])
    }


def test_audit__refused_edit__not_recorded(fleet: Any, editor: Any, draft: PolicyVersion) -> None:
    # Given a draft and the audit log so far
    entries_before = AuditEntry.objects.count()

    # When an invalid edit is refused
    with pytest.raises(ValidationFailed):
        policy_draft_update_cells(
            actor=editor, fleet=fleet, revision=1, edits=[_edit(VOICE_NORMAL, threshold=2)]
        )

    # Then the log has no entry for it
    assert AuditEntry.objects.count() == entries_before
