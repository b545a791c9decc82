"""Segments: device attributes at enrolment and over MQTT, the segment API (roles, revisions,
audit, bad input), the preview's counts against the SDK's own evaluation, and the pages."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.response import Response
from rest_framework.test import APIClient

from edge_sdk import mqtt_topics
from edge_sdk.segments import attributes_parse, device_attributes, rule_matches, segments_of
from routing_policies.models import AuditEntry, Device, Segment
from routing_policies.mqtt.consume import Drops, Incoming, messages_consume
from routing_policies.services import device_enroll, device_revoke
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field
from tests.unit.edge_sdk.test_segments import attribute_sets, rules

pytestmark = pytest.mark.django_db

ENROLL = "/api/v1/devices/enroll"
NPU = {"attribute": "accelerator", "equals": "npu"}
NPU_14 = {"all_of": [NPU, {"attribute": "os_version", "range": {"gte": "14"}}]}

# Three phones: two with an NPU (one on Android 13), one that reported nothing.
PHONES = {
    "pixel": {"accelerator": "npu", "os_version": "14", "memory_gb": 8, "region": "eu-west"},
    "galaxy": {"accelerator": "npu", "os_version": "13", "memory_gb": 8},
    "old-app": {},
}


def _url(fleet: Any, rest: str = "") -> str:
    return f"/api/v1/fleets/{fleet.slug}/segments/{rest}"


@pytest.fixture
def phones(fleet: Any, fleet_key: str) -> dict[str, Device]:
    return {
        name: device_enroll(
            fleet_key=fleet_key, device_id=name, platform="android", attributes=attributes
        )[0]
        for name, attributes in PHONES.items()
    }


@pytest.fixture
def as_editor(client_as: Callable[[Any], APIClient], editor: Any) -> APIClient:
    return client_as(editor)


def _create(client: APIClient, fleet: Any, name: str = "npu-14", rule: Any = None) -> Response:
    body = {"name": name, "description": "NPU on 14+", "rule": NPU_14 if rule is None else rule}
    response: Response = client.post(_url(fleet), body, format="json")
    return response


def _details(response: Response) -> list[str]:
    return [d["field"] for d in response.json()["error"]["details"]]


# --- attributes at enrolment ----------------------------------------------------------------------


def test_enroll__attributes__stored_as_sent_unknown_left_out(
    api_client: APIClient, fleet: Any, fleet_key: str
) -> None:
    # Given / When a phone enrols saying some of what it is
    body = {
        "fleet_key": fleet_key,
        "device_id": "phone-1",
        "platform": "android",
        "model": "Pixel 8",
        "attributes": {
            "accelerator": "npu",
            "memory_gb": 8,
            "local_model": "qwen2.5-1.5b",
            "quantisation": "int4",
            "region": None,
        },
    }
    response = api_client.post(ENROLL, body, format="json")

    # Then what it said is stored, and what it did not say (or said null) is unknown
    assert response.status_code == 201, response.content
    device = Device.objects.get()
    assert device.attributes == {
        "accelerator": "npu",
        "memory_gb": 8,
        "local_model": "qwen2.5-1.5b",
        "quantisation": "int4",
    }


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ({"accelerator": "tpu"}, "attributes.accelerator"),
        ({"memory_gb": 1e6}, "attributes.memory_gb"),
        ({"region": "x" * 33}, "attributes.region"),
        ({"os_version": "14\u0000"}, "attributes.os_version"),
        ({"colour": "red"}, "attributes.colour"),
        ({"platform": "android"}, "attributes.platform"),
        ([], "attributes"),
        ("npu", "attributes"),
    ],
)
def test_enroll__bad_attribute__400_naming_it_nothing_enrolled(
    api_client: APIClient, fleet: Any, fleet_key: str, attributes: Any, field: str
) -> None:
    # Given / When a device enrols with an attribute out of its bounds
    body = {"fleet_key": fleet_key, "device_id": "phone-1", "attributes": attributes}
    response = api_client.post(ENROLL, body, format="json")

    # Then 400 names the attribute, and no device is enrolled
    assert response.status_code == 400, response.content
    assert _details(response) == [field]
    assert not Device.objects.exists()


def test_mqtt_birth__attributes__stored_and_bad_ones_dropped(fleet: Any, fleet_key: str) -> None:
    # Given two enrolled devices on MQTT
    for name in ("car-1", "car-2"):
        device_enroll(fleet_key=fleet_key, device_id=name)
    prefix = "edge-routing/v1"

    def birth(device_id: str, attributes: Any) -> Incoming:
        topic = mqtt_topics.device_topic(prefix, fleet.slug, device_id, "presence")
        payload = json.dumps(
            {"online": True, "platform": "android-automotive", "attributes": attributes}
        )
        return Incoming(topic=topic, payload=payload.encode(), received_at=timezone.now())

    # When one's birth says what it is and the other's carries a bad attribute
    drops = Drops()
    messages_consume(
        [
            birth("car-1", {"accelerator": "npu", "memory_gb": 12}),
            birth("car-2", {"memory_gb": -4}),
        ],
        prefix=prefix,
        telemetry=None,
        drops=drops,
    )

    # Then the first is stored as sent (and online); the second is dropped, nothing stored
    car1, car2 = Device.objects.order_by("device_id")
    assert car1.attributes == {"accelerator": "npu", "memory_gb": 12}
    assert car1.connected
    assert car2.attributes == {}
    assert not car2.connected
    assert drops.counts == {"malformed": 1}


# --- the segment API ------------------------------------------------------------------------------


def test_segment_api__create_read_update_delete__counts_revisions_and_audit(
    as_editor: APIClient, fleet: Any, phones: dict[str, Device]
) -> None:
    # Given three phones, of which one has an NPU and Android 14
    # When an editor adds the segment "NPU on 14+"
    created = _create(as_editor, fleet)

    # Then it is stored with revision 1 and matches 1 of the 3 enrolled devices
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["name"], body["revision"], body["rule"]) == ("npu-14", 1, NPU_14)
    assert body["preview"] == {"matching": 1, "devices": 3, "warnings": []}
    listed = as_editor.get(_url(fleet)).json()
    assert listed["devices"] == 3
    assert listed["segments"][0]["preview"]["matching"] == 1

    # When the rule is widened to any NPU, as of revision 1
    updated = as_editor.patch(_url(fleet, "npu-14"), {"revision": 1, "rule": NPU}, format="json")

    # Then revision 2 matches 2; a second edit as of revision 1 is refused (409), not applied
    assert updated.status_code == 200, updated.content
    assert (updated.json()["revision"], updated.json()["preview"]["matching"]) == (2, 2)
    stale = as_editor.patch(
        _url(fleet, "npu-14"), {"revision": 1, "description": "x"}, format="json"
    )
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_revision"
    assert Segment.objects.get().description == "NPU on 14+"

    # When it is deleted
    deleted = as_editor.delete(_url(fleet, "npu-14"))

    # Then it is gone, and every change is in the audit log with who did it
    assert deleted.status_code == 204
    assert as_editor.get(_url(fleet, "npu-14")).status_code == 404
    entries = AuditEntry.objects.filter(action__startswith="segment.").order_by("pk")
    assert [(e.action, e.actor_name) for e in entries] == [
        ("segment.created", "editor"),
        ("segment.updated", "editor"),
        ("segment.deleted", "editor"),
    ]
    assert entries[1].diff == [{"field": "rule", "before": NPU_14, "after": NPU}]


def test_segment_api__same_name_twice__409_naming_name_one_stored(
    as_editor: APIClient, fleet: Any
) -> None:
    # Given a segment "npu-14"
    assert _create(as_editor, fleet).status_code == 201

    # When another is added under the same name (or one is renamed to it)
    again = _create(as_editor, fleet, rule=NPU)
    _create(as_editor, fleet, name="other", rule=NPU)
    renamed = as_editor.patch(
        _url(fleet, "other"), {"revision": 1, "name": "npu-14"}, format="json"
    )

    # Then both are refused naming `name`, and nothing changed
    for response in (again, renamed):
        assert response.status_code == 409, response.content
        assert _details(response) == ["name"]
    assert sorted(Segment.objects.values_list("name", "rule")) == [
        ("npu-14", NPU_14),
        ("other", NPU),
    ]


def test_segment_api__roles__viewer_reads_and_previews_editor_writes(
    client_as: Callable[[Any], APIClient],
    api_client: APIClient,
    viewer: Any,
    fleet: Any,
) -> None:
    # Given a viewer and an anonymous client
    as_viewer = client_as(viewer)

    # When / Then the viewer lists and previews but cannot add, change or delete
    assert as_viewer.get(_url(fleet)).status_code == 200
    assert as_viewer.post(_url(fleet, "preview"), {"rule": NPU}, format="json").status_code == 200
    assert _create(as_viewer, fleet).status_code == 403
    Segment.objects.create(fleet=fleet, name="npu", rule=NPU)
    assert as_viewer.patch(_url(fleet, "npu"), {"revision": 1}, format="json").status_code == 403
    assert as_viewer.delete(_url(fleet, "npu")).status_code == 403
    # and without credentials nothing is answered
    assert api_client.get(_url(fleet)).status_code == 401
    assert api_client.post(_url(fleet, "preview"), {"rule": NPU}, format="json").status_code == 401
    assert Segment.objects.count() == 1


def _deep(levels: int) -> dict[str, Any]:
    rule: dict[str, Any] = NPU
    for _ in range(levels):
        rule = {"any_of": [rule]}
    return rule


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "npu", "rule": {"attribute": "colour", "equals": "red"}}, "rule.attribute"),
        ({"name": "npu", "rule": {"attribute": "region", "equals": "r" * 500}}, "rule.equals"),
        ({"name": "npu", "rule": {"attribute": "region", "in": ["a\u0000b"]}}, "rule.in[0]"),
        ({"name": "npu", "rule": _deep(5)}, "rule.any_of[0].any_of[0].any_of[0].any_of[0].any_of"),
        ({"name": "npu", "rule": {"any_of": [NPU] * 33}}, "rule.any_of"),
        ({"name": "npu", "rule": {"any_of": [{"any_of": [NPU] * 30}] * 3}}, "rule"),
        (
            {"name": "npu", "rule": {"attribute": "memory_gb", "range": {"gt": 8, "lt": 8}}},
            "rule.range",
        ),
        ({"name": "npu", "rule": {"all_of": []}}, "rule.all_of"),
        ({"name": "npu", "rule": []}, "rule"),
        ({"name": "npu"}, "rule"),
        ({"name": "NPU phones", "rule": NPU}, "name"),
        ({"name": "n" * 65, "rule": NPU}, "name"),
        ({"name": "preview", "rule": NPU}, "name"),
        ({"name": "npu\u0000", "rule": NPU}, "name"),
        ({"name": "npu", "rule": NPU, "description": " padded"}, "description"),
        ({"name": "npu", "rule": NPU, "colour": "red"}, "colour"),
    ],
)
def test_segment_api__invalid_body__400_naming_the_field_nothing_stored(
    as_editor: APIClient, fleet: Any, body: dict[str, Any], field: str
) -> None:
    # Given / When an editor sends a segment that is not valid
    response = as_editor.post(_url(fleet), body, format="json")

    # Then 400 names the field (inside the rule, where), and nothing is stored
    assert response.status_code == 400, response.content
    assert set(_details(response)) == {field}
    assert not Segment.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="segment.").exists()


@pytest.mark.parametrize("field", ["rule", "name"])
@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_segment_api__hostile_json_value__400_names_field_nothing_stored(
    as_editor: APIClient, fleet: Any, hostile: Hostile, field: str
) -> None:
    # Given a valid segment body
    body = {"name": "npu", "rule": NPU}

    # When one field is nested 1,000 deep, holds a NUL or a lone surrogate, or is NaN
    response = as_editor.generic(
        "POST", _url(fleet), with_field(body, field, hostile.raw), content_type="application/json"
    )

    # Then 400 names it, nothing stored
    assert response.status_code == 400, response.content
    assert_names(response.json()["error"], field, hostile)
    assert not Segment.objects.exists()


def test_segment_api__update_without_revision_or_unknown__refused(
    as_editor: APIClient, fleet: Any
) -> None:
    # Given a segment
    _create(as_editor, fleet)

    # When it is changed without saying which revision, or a missing one is changed
    no_revision = as_editor.patch(_url(fleet, "npu-14"), {"rule": NPU}, format="json")
    missing = as_editor.patch(_url(fleet, "nope"), {"revision": 1, "rule": NPU}, format="json")

    # Then 400 naming `revision`, 404; nothing changed
    assert no_revision.status_code == 400
    assert _details(no_revision) == ["revision"]
    assert missing.status_code == 404
    assert Segment.objects.get().revision == 1


# --- the preview ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "matching", "codes"),
    [
        (NPU, 2, []),
        ({"attribute": "accelerator", "equals": "cpu"}, 0, ["matches_none"]),
        ({"attribute": "platform", "equals": "android"}, 3, ["matches_all"]),
        (
            {"attribute": "app_version", "range": {"gte": "1"}},
            0,
            ["matches_none", "attribute_unreported"],
        ),
        ({"attribute": "region", "in": ["eu-west", "us-east"]}, 1, []),
    ],
)
def test_segment_preview__unsaved_rule__counts_and_warns_stores_nothing(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    fleet: Any,
    phones: dict[str, Device],
    rule: dict[str, Any],
    matching: int,
    codes: list[str],
) -> None:
    # Given three phones
    # When a rule is previewed
    response = client_as(viewer).post(_url(fleet, "preview"), {"rule": rule}, format="json")

    # Then the answer says how many of the enrolled devices it matches, and what to watch
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["matching"], body["devices"]) == (matching, 3)
    assert [w["code"] for w in body["warnings"]] == codes
    assert not Segment.objects.exists()


def test_segment_preview__revoked_device__not_counted(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any, fleet_key: str, phones: Any
) -> None:
    # Given a fourth NPU phone, revoked
    gone, _ = device_enroll(
        fleet_key=fleet_key, device_id="gone", attributes={"accelerator": "npu"}
    )
    device_revoke(actor=None, device=gone)

    # When NPU phones are counted
    body = client_as(viewer).post(_url(fleet, "preview"), {"rule": NPU}, format="json").json()

    # Then only enrolled (not revoked) devices count
    assert (body["matching"], body["devices"]) == (2, 3)


def test_segment_preview__empty_fleet__says_no_devices(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any
) -> None:
    body = client_as(viewer).post(_url(fleet, "preview"), {"rule": NPU}, format="json").json()
    assert (body["matching"], body["devices"]) == (0, 0)
    assert [w["code"] for w in body["warnings"]] == ["no_devices"]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    devices=st.lists(attribute_sets, min_size=0, max_size=8),
    named=st.lists(rules, min_size=1, max_size=3),
)
def test_segment_preview__random_fleet_and_rules__server_counts_equal_sdk_evaluation(
    client_as: Callable[[Any], APIClient],
    viewer: Any,
    fleet: Any,
    fleet_key: str,
    devices: list[dict[str, Any]],
    named: list[dict[str, Any]],
) -> None:
    # Given a fleet of random devices, enrolled with what each SDK reports
    Device.objects.all().delete()
    Segment.objects.all().delete()
    seen_by_sdk = []
    for index, attributes in enumerate(devices):
        reported = {k: v for k, v in attributes.items() if k not in ("platform", "model")}
        device_enroll(
            fleet_key=fleet_key,
            device_id=f"d-{index}",
            platform=attributes.get("platform", ""),
            model=attributes.get("model", ""),
            attributes=attributes_parse(reported),
        )
        seen_by_sdk.append(attributes)
    segments = {f"s{i}": rule for i, rule in enumerate(named)}
    for name, rule in segments.items():
        Segment.objects.create(fleet=fleet, name=name, rule=rule)
    client = client_as(viewer)

    # When the server counts each rule (its census, one GROUP BY) and lists the devices
    listed = client.get(_url(fleet)).json()["segments"]
    rows = client.get(f"/api/v1/fleets/{fleet.slug}/devices/?limit=100").json()["results"]

    # Then every count is what the devices' own evaluation says, and so is each membership
    for segment in listed:
        expected = sum(rule_matches(segments[segment["name"]], a) for a in seen_by_sdk)
        assert segment["preview"]["matching"] == expected
        assert segment["preview"]["devices"] == len(devices)
    for row in rows:
        attributes = seen_by_sdk[int(row["device_id"].removeprefix("d-"))]
        assert row["segments"] == segments_of(segments, attributes)
        assert {k: v for k, v in row["attributes"].items() if v is not None} == device_attributes(
            platform=attributes.get("platform", ""),
            model=attributes.get("model", ""),
            reported={k: v for k, v in attributes.items() if k not in ("platform", "model")},
        )


# --- the device list ------------------------------------------------------------------------------


def test_device_list_api__attributes_and_segments__unknown_is_null(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any, phones: dict[str, Device]
) -> None:
    # Given the NPU-on-14 segment
    Segment.objects.create(fleet=fleet, name="npu-14", rule=NPU_14)

    # When the device list is read
    rows = client_as(viewer).get(f"/api/v1/fleets/{fleet.slug}/devices/").json()["results"]

    # Then each device shows every attribute (null: unknown) and its segments
    by_id = {row["device_id"]: row for row in rows}
    assert by_id["pixel"]["segments"] == ["npu-14"]
    assert by_id["galaxy"]["segments"] == []
    assert by_id["pixel"]["attributes"]["accelerator"] == "npu"
    assert by_id["pixel"]["attributes"]["app_version"] is None
    assert set(by_id["old-app"]["attributes"].values()) == {None, "android"}


# --- pages ----------------------------------------------------------------------------------------


def test_segment_page__editor_adds_and_refused_rule_says_where(
    editor: Any, viewer: Any, fleet: Any, phones: dict[str, Device]
) -> None:
    # Given an editor on the segment page
    browser = Client()
    browser.force_login(editor)
    page = f"/fleets/{fleet.slug}/segments/"
    assert browser.get(page).status_code == 200

    # When a bad rule is posted, then a good one
    bad = browser.post(f"{page}add/", {"name": "npu", "rule": '{"attribute": "colour"}'})
    good = browser.post(f"{page}add/", {"name": "npu", "rule": json.dumps(NPU)}, follow=True)

    # Then the bad one comes back 400 naming where, nothing stored; the good one is listed
    assert bad.status_code == 400
    assert "rule.attribute" in bad.content.decode()
    assert good.status_code == 200
    assert Segment.objects.get().rule == NPU
    assert 'data-segment="npu"' in good.content.decode()

    # And a viewer sees the list, but no editor, and may not post
    browser.force_login(viewer)
    assert 'id="segment-form"' not in browser.get(page).content.decode()
    assert browser.post(f"{page}add/", {"name": "x", "rule": json.dumps(NPU)}).status_code == 403


def test_segment_page__edit__saved_as_of_its_revision_and_stale_refused(
    editor: Any, fleet: Any
) -> None:
    # Given a segment with a description, and its edit form as drawn (revision 1)
    Segment.objects.create(fleet=fleet, name="npu", description="old", rule=NPU)
    browser = Client()
    browser.force_login(editor)
    page = f"/fleets/{fleet.slug}/segments/"
    form = browser.get(f"{page}?edit=npu").content.decode()
    assert 'name="revision" value="1"' in form
    assert "&quot;attribute&quot;: &quot;accelerator&quot;" in form  # attribute first

    # When the rule is widened and the description cleared, then the same form posted again
    posted = {"revision": "1", "name": "npu", "description": "", "rule": json.dumps(NPU_14)}
    saved = browser.post(f"{page}npu/save/", posted)
    stale = browser.post(f"{page}npu/save/", {**posted, "description": "again"})

    # Then the first is saved (revision 2), the second refused as stale, nothing overwritten
    assert saved.status_code == 302
    assert stale.status_code == 409
    segment = Segment.objects.get()
    assert (segment.rule, segment.description, segment.revision) == (NPU_14, "", 2)


def _queries(client: APIClient, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_segment_list_and_device_list__more_segments_and_devices__same_queries(
    client_as: Callable[[Any], APIClient], viewer: Any, fleet: Any, fleet_key: str
) -> None:
    # Given a fleet with one segment and one device, read once of each list
    client = client_as(viewer)
    Segment.objects.create(fleet=fleet, name="s0", rule=NPU)
    device_enroll(fleet_key=fleet_key, device_id="d-0", attributes={"accelerator": "npu"})
    segments_url, devices_url = _url(fleet), f"/api/v1/fleets/{fleet.slug}/devices/"
    _queries(client, segments_url)  # reads the role groups, cached on this test user after
    few = (_queries(client, segments_url), _queries(client, devices_url))

    # When it has ten segments and twenty devices of varied kinds
    for index in range(1, 10):
        Segment.objects.create(fleet=fleet, name=f"s{index}", rule=NPU_14)
    for index in range(1, 20):
        reported = {"accelerator": ["npu", "gpu", "cpu"][index % 3], "memory_gb": index}
        device_enroll(fleet_key=fleet_key, device_id=f"d-{index}", attributes=reported)

    # Then each list reads the database as often as before: 3 and 6 queries
    assert (_queries(client, segments_url), _queries(client, devices_url)) == few == (3, 5)
