"""Policy overrides by segment: the draft API (roles, revisions, audit, bad input naming the
segment, cell and field), publishing (validated, rules inlined, ETag per version), export and
import, the diff, segments a version names, and a device's resolved table: the server's equals
the SDK's on random fleets (hypothesis)."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.response import Response
from rest_framework.test import APIClient

from edge_sdk import overrides as sdk_overrides
from edge_sdk.policy import PolicyStore
from edge_sdk.segments import attributes_parse, device_attributes
from routing_policies.cell_schema import document_cell
from routing_policies.models import AuditEntry, Device, PolicyVersion, Segment
from routing_policies.segments import rules as server_rules
from routing_policies.services import (
    device_enroll,
    policy_draft_create,
    policy_draft_override_set,
    policy_draft_update_cells,
    policy_version_publish,
)
from tests.hostile_json import HOSTILE_PARAMS, Hostile, with_field
from tests.unit.edge_sdk.test_segments import attribute_sets, rules

pytestmark = pytest.mark.django_db

NPU = {"attribute": "accelerator", "equals": "npu"}
CPU = {"attribute": "accelerator", "equals": "cpu"}
VOICE = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}
VOICE_LABEL = "voice/interactive/normal"


def _override_url(fleet: Any, segment: str = "npu") -> str:
    return f"/api/v1/fleets/{fleet.slug}/draft/overrides/{segment}"


def _details(response: Response) -> list[dict[str, Any]]:
    details: list[dict[str, Any]] = response.json()["error"]["details"]
    return details


@pytest.fixture
def segments(fleet: Any, editor: Any) -> None:
    Segment.objects.create(fleet=fleet, name="npu", rule=NPU)
    Segment.objects.create(fleet=fleet, name="cpu", rule=CPU)


@pytest.fixture
def draft(fleet: Any, editor: Any, segments: None) -> PolicyVersion:
    return policy_draft_create(actor=editor, fleet=fleet)


@pytest.fixture
def as_editor(client_as: Callable[[Any], APIClient], editor: Any) -> APIClient:
    return client_as(editor)


def _put(
    client: APIClient, fleet: Any, revision: int, values: Any, segment: str = "npu", **more: Any
) -> Response:
    body = {"revision": revision, "cells": [{**VOICE, "values": values}], **more}
    response: Response = client.put(_override_url(fleet, segment), body, format="json")
    return response


# --- the draft API ------------------------------------------------------------------------------


def test_override_api__set__draft_document_carries_it_with_the_rule_inlined_and_audited(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion
) -> None:
    # Given a draft and a segment `npu`
    # When an editor overrides θ and the weights (nested, as the document nests them)
    weights = {"length": 0.2, "intent": 0.4, "lm": 0.4}
    response = _put(as_editor, fleet, draft.revision, {"threshold": 0.8, "weights": weights})

    # Then the draft's document carries the override, the rule inlined, at a new revision
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["revision"] == draft.revision + 1
    assert body["document"]["overrides"] == [
        {
            "segment": "npu",
            "rule": NPU,
            "cells": [{**VOICE, "threshold": 0.8, "weights": weights}],
        }
    ]
    entry = AuditEntry.objects.filter(action="policy_override.set").get()
    assert entry.after["overrides.npu.voice/interactive/normal.threshold"] == 0.8
    assert entry.actor_name == "editor"


def test_override_api__position__sets_precedence_and_remove_takes_it_out(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion
) -> None:
    # Given overrides for npu then cpu
    _put(as_editor, fleet, draft.revision, {"threshold": 0.8})
    _put(as_editor, fleet, draft.revision + 1, {"threshold": 0.3}, segment="cpu")

    # When cpu is moved first, then npu removed
    moved = _put(
        as_editor, fleet, draft.revision + 2, {"threshold": 0.3}, segment="cpu", position=1
    )
    order = [o["segment"] for o in moved.json()["document"]["overrides"]]
    removed = as_editor.delete(f"{_override_url(fleet)}?revision={draft.revision + 3}")

    # Then the order follows, and the removal leaves cpu alone, audited
    assert order == ["cpu", "npu"]
    assert removed.status_code == 200
    assert [o["segment"] for o in removed.json()["document"]["overrides"]] == ["cpu"]
    assert AuditEntry.objects.filter(action="policy_override.removed").count() == 1
    missing = as_editor.delete(f"{_override_url(fleet)}?revision={draft.revision + 4}")
    assert missing.status_code == 404


@pytest.mark.parametrize(
    ("values", "cell", "field"),
    [
        ({"threshold": 1.5}, VOICE_LABEL, "threshold"),
        ({"mode": "sideways"}, VOICE_LABEL, "mode"),
        ({"weights.length": 0.9}, VOICE_LABEL, "weights"),  # the sum breaks: the whole cell
        ({"fallback": None}, VOICE_LABEL, "fallback"),
        ({"thresold": 0.5}, VOICE_LABEL, "thresold"),
        ({"latency_budget_ms": 10**12}, VOICE_LABEL, "latency_budget_ms"),
        ({"shadow_refine_rate": 0.5}, VOICE_LABEL, "shadow_refine_rate"),
    ],
)
def test_override_api__breaks_a_cell__400_naming_segment_cell_field_nothing_saved(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion, values: Any, cell: str, field: str
) -> None:
    # Given a draft / When an override that breaks the cell's validation is sent
    response = _put(as_editor, fleet, draft.revision, values)

    # Then 400 names the segment, the cell and the field; nothing is stored
    assert response.status_code == 400, response.json()
    assert {"segment": "npu", "cell": cell, "field": field}.items() <= _details(response)[0].items()
    draft.refresh_from_db()
    assert draft.overrides == []
    assert draft.revision == 1


def test_override_api__sensitive_cell_sent_to_the_cloud__400_naming_segment_and_mode(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion
) -> None:
    # Given the sensitive tier keeps tasks local with uploads forbidden
    body = {
        "revision": draft.revision,
        "cells": [{**VOICE, "privacy_tier": "sensitive", "values": {"mode": "cloud_only"}}],
    }
    # When an override would send them to the cloud
    response = as_editor.put(_override_url(fleet), body, format="json")
    # Then refused, naming the segment, the cell and the mode
    assert response.status_code == 400
    assert {"segment": "npu", "cell": "voice/interactive/sensitive", "field": "mode"}.items() <= (
        _details(response)[0].items()
    )


def test_override_api__unknown_segment_cell_or_shape__400_naming_it(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion
) -> None:
    # Given / When the segment is not the fleet's, the cell not the table's, a cell twice
    unknown = _put(as_editor, fleet, draft.revision, {"threshold": 0.5}, segment="gpu")
    nul = _put(as_editor, fleet, draft.revision, {"threshold": 0.5}, segment="np\x00u")
    body = {"revision": draft.revision, "cells": [{**VOICE, "task_type": "code", "values": {}}]}
    not_a_cell = as_editor.put(_override_url(fleet), body, format="json")
    body = {
        "revision": draft.revision,
        "cells": [{**VOICE, "task_type": "code", "values": {"a": 1}}],
    }
    no_such_cell = as_editor.put(_override_url(fleet), body, format="json")
    twice = {
        "revision": draft.revision,
        "cells": [{**VOICE, "values": {"threshold": 0.5}}, {**VOICE, "values": {"threshold": 0.6}}],
    }
    duplicate = as_editor.put(_override_url(fleet), twice, format="json")
    extra = _put(as_editor, fleet, draft.revision, {"threshold": 0.5}, colour="red")
    position = _put(as_editor, fleet, draft.revision, {"threshold": 0.5}, position=99)

    # Then each is a 400 naming what is wrong; nothing stored
    assert unknown.status_code == 400
    assert _details(unknown)[0]["segment"] == "gpu"
    assert nul.status_code in (400, 404)
    assert not_a_cell.status_code == 400
    assert "values" in json.dumps(not_a_cell.json())
    assert no_such_cell.status_code == 400
    assert _details(no_such_cell)[0]["cell"] == ("code/interactive/normal")
    assert duplicate.status_code == 400
    assert _details(duplicate)[0]["cell"] == VOICE_LABEL
    assert extra.status_code == 400
    assert _details(extra)[0]["field"] == "colour"
    assert position.status_code == 400
    assert _details(position)[0]["field"] == "position"
    draft.refresh_from_db()
    assert draft.overrides == []
    assert draft.revision == 1


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_override_api__hostile_json_value__400_nothing_stored(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion, hostile: Hostile
) -> None:
    # Given / When a hostile value stands for the override's cells
    body = with_field({"revision": draft.revision}, "cells", hostile.raw)
    response = as_editor.put(_override_url(fleet), body, content_type="application/json")
    # Then a 4xx naming the field, never a 5xx; nothing stored
    assert response.status_code == 400, response.content
    assert hostile.says in json.dumps(response.json())
    draft.refresh_from_db()
    assert draft.overrides == []


def test_override_api__roles_revision_and_oversized(
    client_as: Callable[[Any], APIClient],
    api_client: APIClient,
    viewer: Any,
    as_editor: APIClient,
    fleet: Any,
    draft: PolicyVersion,
) -> None:
    # Given / When a viewer, nobody, a stale revision, no revision, too many cells
    as_viewer = _put(client_as(viewer), fleet, draft.revision, {"threshold": 0.5})
    anonymous = _put(api_client, fleet, draft.revision, {"threshold": 0.5})
    stale = _put(as_editor, fleet, draft.revision + 5, {"threshold": 0.5})
    no_revision = as_editor.put(
        _override_url(fleet), {"cells": [{**VOICE, "values": {"threshold": 0.5}}]}, format="json"
    )
    many = {"revision": draft.revision, "cells": [{**VOICE, "values": {"threshold": 0.5}}] * 4097}
    oversized = as_editor.put(_override_url(fleet), many, format="json")

    # Then refused each, nothing stored
    assert as_viewer.status_code == 403
    assert anonymous.status_code in (401, 403)
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_revision"
    assert no_revision.status_code == 428
    assert oversized.status_code in (400, 413)
    draft.refresh_from_db()
    assert draft.overrides == []


# --- publishing, the document, the diff, export and import --------------------------------------


def _publish(actor: Any, fleet: Any, draft: PolicyVersion) -> PolicyVersion:
    draft.refresh_from_db()
    return policy_version_publish(actor=actor, fleet=fleet, revision=draft.revision, note="npu θ")


def test_publish__overrides__rules_inlined_frozen_etag_and_diff(
    client_as: Callable[[Any], APIClient],
    as_editor: APIClient,
    publisher: Any,
    fleet: Any,
    draft: PolicyVersion,
) -> None:
    # Given a draft overriding θ for npu, published as v2
    _put(as_editor, fleet, draft.revision, {"threshold": 0.85})
    v2 = _publish(publisher, fleet, draft)
    v1 = PolicyVersion.objects.get(fleet=fleet, number=1)

    # When the segment's rule changes afterwards
    Segment.objects.filter(fleet=fleet, name="npu").update(rule=CPU)
    document = client_as(publisher).get(f"/api/v1/fleets/{fleet.slug}/versions/2/document").json()
    diff = client_as(publisher).get(f"/api/v1/fleets/{fleet.slug}/diff/?a=1&b=2").json()

    # Then v2's document keeps the rule it was published with, its ETag names that content,
    # v1 (no overrides) has no section and the diff shows the override
    assert document["overrides"][0]["rule"] == NPU
    assert document["etag"] == v2.etag != v1.etag
    v1_document = client_as(publisher).get(f"/api/v1/fleets/{fleet.slug}/versions/1/document")
    assert "overrides" not in v1_document.json()
    assert diff["overrides"] == [
        {
            "segment": "npu",
            "status": "added",
            "fields": [
                {"field": "position", "before": None, "after": 1},
                {"field": "rule", "before": None, "after": NPU},
                {"field": f"{VOICE_LABEL}.threshold", "before": None, "after": 0.85},
            ],
        }
    ]


def test_publish__base_cell_changed_under_an_override__refused_naming_the_segment(
    as_editor: APIClient, editor: Any, publisher: Any, fleet: Any, draft: PolicyVersion
) -> None:
    # Given an override's shadow refines, valid while the cell allows uploads
    _put(as_editor, fleet, draft.revision, {"shadow_refine_rate": 0.05})
    # When the base cell then forbids uploads
    policy_draft_update_cells(
        actor=editor,
        fleet=fleet,
        revision=draft.revision + 1,
        edits=[{**VOICE, "values": {"upload.allowed": False}}],
    )
    # Then publishing is refused, naming the segment, the cell and the field
    with pytest.raises(Exception) as refused:
        _publish(publisher, fleet, draft)
    details = refused.value.details  # type: ignore[attr-defined]
    assert {"segment": "npu", "cell": VOICE_LABEL, "field": "shadow_refine_rate"}.items() <= (
        details[0].items()
    )


def test_export_import__keeps_the_overrides_and_checks_their_segments(
    as_editor: APIClient, fleet: Any, draft: PolicyVersion
) -> None:
    # Given a draft with an override, exported
    _put(as_editor, fleet, draft.revision, {"threshold": 0.85, "fallback": "none"})
    exported = as_editor.get(f"/api/v1/fleets/{fleet.slug}/versions/draft/document").json()

    # When imported again (replacing the draft), and once naming a segment the fleet lacks
    url = f"/api/v1/fleets/{fleet.slug}/draft/document"
    again = as_editor.put(url, {**exported, "revision": draft.revision + 1}, format="json")
    bad = {**exported, "revision": draft.revision + 2}
    bad["overrides"] = [{**exported["overrides"][0], "segment": "gpu"}]
    refused = as_editor.put(url, bad, format="json")

    # Then the overrides survive the round trip; the unknown segment is a 400 naming it
    assert again.status_code == 200, again.json()
    assert again.json()["document"]["overrides"] == exported["overrides"]
    assert refused.status_code == 400
    assert _details(refused)[0]["segment"] == "gpu"


def test_segment_named_by_a_version__delete_and_rename_409_naming_the_versions(
    as_editor: APIClient, publisher: Any, fleet: Any, draft: PolicyVersion
) -> None:
    # Given v2 publishes an override for npu, and the next draft keeps it
    _put(as_editor, fleet, draft.revision, {"threshold": 0.85})
    _publish(publisher, fleet, draft)
    policy_draft_create(actor=publisher, fleet=fleet)

    # When the segment is deleted or renamed
    deleted = as_editor.delete(f"/api/v1/fleets/{fleet.slug}/segments/npu")
    renamed = as_editor.patch(
        f"/api/v1/fleets/{fleet.slug}/segments/npu", {"revision": 1, "name": "npu2"}, format="json"
    )

    # Then both are refused naming the versions; cpu (unused) can go
    assert deleted.status_code == 409
    assert deleted.json()["error"]["code"] == "segment_in_use"
    assert "draft, v2" in deleted.json()["error"]["message"]
    assert renamed.status_code == 409
    assert as_editor.delete(f"/api/v1/fleets/{fleet.slug}/segments/cpu").status_code == 204


# --- the table a device runs ---------------------------------------------------------------------


def test_resolution__server__is_the_sdks_function() -> None:
    assert server_rules.resolve_cells is sdk_overrides.resolve_cells
    assert server_rules.matching_overrides is sdk_overrides.matching_overrides


def test_resolution__first_matching_segment_wins_each_cell_whole() -> None:
    # Given two overrides of the same cell, and one of another cell
    document = {
        "cells": [{**VOICE, "threshold": 0.6, "mode": "auto"}, {**VOICE, "task_type": "text"}],
        "overrides": [
            {"segment": "a", "rule": NPU, "cells": [{**VOICE, "threshold": 0.9}]},
            {"segment": "b", "rule": NPU, "cells": [{**VOICE, "mode": "device_only"}]},
            {"segment": "c", "rule": CPU, "cells": [{**VOICE, "threshold": 0.1}]},
        ],
    }
    # When an NPU device resolves its table
    cells = sdk_overrides.resolve_cells(document, {"accelerator": "npu"})
    # Then the first matching override takes the cell, whole (b's mode does not join it)
    assert cells[0] == {**VOICE, "threshold": 0.9, "mode": "auto"}
    assert cells[1] == {**VOICE, "task_type": "text"}
    assert sdk_overrides.resolve_cells(document, {})[0]["threshold"] == 0.6


def test_device_table_api__segments_and_values_it_runs(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    as_editor: APIClient,
    publisher: Any,
    fleet: Any,
    fleet_key: str,
    draft: PolicyVersion,
) -> None:
    # Given v2 with an npu override, an NPU phone and a CPU phone
    _put(as_editor, fleet, draft.revision, {"threshold": 0.85})
    _publish(publisher, fleet, draft)
    for name, accelerator in (("pixel", "npu"), ("old", "cpu")):
        device_enroll(fleet_key=fleet_key, device_id=name, attributes={"accelerator": accelerator})
    client = client_as(viewer)

    # When their tables are asked for v2
    url = f"/api/v1/fleets/{fleet.slug}/devices/{{}}/table?version=2"
    pixel = client.get(url.format("pixel")).json()
    old = client.get(url.format("old")).json()

    # Then the NPU phone runs θ 0.85 from npu, the CPU phone the base θ
    voice = next(c for c in pixel["cells"] if c["cell"] == VOICE_LABEL)
    assert (voice["values"]["threshold"], voice["segment"], voice["overridden"]) == (
        0.85,
        "npu",
        ["threshold"],
    )
    assert pixel["overrides"] == ["npu"]
    assert old["overrides"] == []
    base = next(c for c in old["cells"] if c["cell"] == VOICE_LABEL)
    assert base["segment"] is None
    assert base["values"]["threshold"] != 0.85
    assert client.get(url.format("nobody")).status_code == 404
    assert client.get(url.replace("2", "99").format("pixel")).status_code == 404
    assert client.get(url.replace("2", "x").format("pixel")).status_code == 400


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    devices=st.lists(attribute_sets, min_size=1, max_size=5),
    named=st.lists(rules, min_size=1, max_size=3),
    thetas=st.lists(
        st.tuples(
            st.sampled_from(["voice", "text", "image"]),
            st.sampled_from(["interactive", "background"]),
            st.floats(min_value=0, max_value=1, allow_nan=False),
            st.sampled_from([None, "device_only", "auto"]),
        ),
        min_size=1,
        max_size=6,
    ),
    data=st.data(),
)
def test_device_table__random_fleet__server_resolution_equals_the_sdks_table(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    editor: Any,
    publisher: Any,
    fleet: Any,
    fleet_key: str,
    devices: list[dict[str, Any]],
    named: list[dict[str, Any]],
    thetas: list[tuple[str, str, float, str | None]],
    data: st.DataObject,
) -> None:
    # Given random segments, a version overriding random θs for them, and random devices
    Device.objects.all().delete()
    PolicyVersion.objects.filter(fleet=fleet, number__gt=1).delete()
    PolicyVersion.objects.filter(fleet=fleet, number__isnull=True).delete()
    Segment.objects.all().delete()
    for index, rule in enumerate(named):
        Segment.objects.create(fleet=fleet, name=f"s{index}", rule=rule)
    draft = policy_draft_create(actor=editor, fleet=fleet)
    for index in range(len(named)):
        cells = {
            f"{task}/{budget}/normal": {"threshold": theta, **({"mode": mode} if mode else {})}
            for task, budget, theta, mode in data.draw(st.permutations(thetas))[: 1 + index % 3]
        }
        draft = policy_draft_override_set(
            actor=editor, fleet=fleet, revision=draft.revision, segment=f"s{index}", cells=cells
        )
    version = policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision, note="x"
    )
    document = (
        client_as(viewer)
        .get(f"/api/v1/fleets/{fleet.slug}/versions/{version.number}/document")
        .json()
    )
    for index, attributes in enumerate(devices):
        reported = {k: v for k, v in attributes.items() if k not in ("platform", "model")}
        device_enroll(
            fleet_key=fleet_key,
            device_id=f"d-{index}",
            platform=attributes.get("platform", ""),
            model=attributes.get("model", ""),
            attributes=attributes_parse(reported),
        )

    for index, attributes in enumerate(devices):
        # When the server resolves the device's table, and the SDK applies the document
        server = (
            client_as(viewer)
            .get(f"/api/v1/fleets/{fleet.slug}/devices/d-{index}/table?version={version.number}")
            .json()
        )
        store = PolicyStore(
            attributes=device_attributes(
                platform=attributes.get("platform", ""),
                model=attributes.get("model", ""),
                reported={k: v for k, v in attributes.items() if k not in ("platform", "model")},
            )
        )
        store.apply(document)

        # Then the SDK routes each cell with exactly the values the server says it runs, field
        # by field (the shadow refine rate is the store's, not the decision cell's)
        for cell in server["cells"]:
            key = tuple(cell["cell"].split("/"))
            runs = document_cell(store.cells[key].to_document())[1]  # type: ignore[index]
            runs["shadow_refine_rate"] = store.shadow_rates.get(key, 0.0)  # type: ignore[call-overload]
            assert runs == cell["values"], (index, cell["cell"])


# --- the draft's life, and the policy page --------------------------------------------------


def test_draft__from_a_version_with_overrides__copies_them_and_a_removed_value_drops_its_cells(
    as_editor: APIClient, editor: Any, publisher: Any, fleet: Any, draft: PolicyVersion
) -> None:
    # Given v2 overriding a voice cell and a text cell for npu
    body = {
        "revision": draft.revision,
        "cells": [
            {**VOICE, "values": {"threshold": 0.8}},
            {**VOICE, "task_type": "text", "values": {"threshold": 0.7}},
        ],
    }
    assert as_editor.put(_override_url(fleet), body, format="json").status_code == 200
    _publish(publisher, fleet, draft)

    # When a draft starts from v2 and the task type `voice` is removed from it
    second = policy_draft_create(actor=editor, fleet=fleet)
    url = f"/api/v1/fleets/{fleet.slug}/draft/dimensions/task_type/voice/"
    after = as_editor.delete(f"{url}?revision={second.revision}")

    # Then the draft had both overrides (its rule read from the segment), and keeps text's only
    assert [o["segment"] for o in second.overrides] == ["npu"]
    assert after.status_code == 200, after.json()
    (override,) = after.json()["document"]["overrides"]
    assert [c["task_type"] for c in override["cells"]] == ["text"]
    assert override["rule"] == NPU


def test_policy_page__editor_sets_and_takes_out_a_field_viewer_cannot(
    viewer: Any, editor: Any, fleet: Any, draft: PolicyVersion
) -> None:
    as_editor, as_viewer = Client(), Client()
    as_editor.force_login(editor)
    as_viewer.force_login(viewer)
    url = f"/fleets/{fleet.slug}/draft/overrides/"
    form = {
        "action": "set",
        "segment": "npu",
        "cell": VOICE_LABEL,
        "field": "threshold",
        "value": "0.8",
        "position": "",
        "revision": str(draft.revision),
    }
    # When the editor sets θ, then a bad value, then takes θ out; and a viewer tries
    saved = as_editor.post(url, form)
    refused = as_editor.post(url, {**form, "value": "lots", "revision": str(draft.revision + 1)})
    page = as_editor.get(f"/fleets/{fleet.slug}/")
    forbidden = as_viewer.post(url, {**form, "revision": str(draft.revision + 1)})
    removed = as_editor.post(url, {**form, "action": "remove", "revision": str(draft.revision + 1)})

    # Then the page shows the override (and the grid names it), the bad value is refused
    # naming the field, the viewer is refused, and taking the last field out removes it
    assert saved.status_code == 302
    assert refused.status_code == 400
    assert "number" in refused.content.decode()
    assert 'data-segment="npu"' in page.content.decode()
    assert "cell-overrides" in page.content.decode()
    assert forbidden.status_code == 403
    assert removed.status_code == 302
    draft.refresh_from_db()
    assert draft.overrides == []
