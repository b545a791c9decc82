"""The rollout and device pages as a browser uses them: forms posted, pages read, roles enforced."""

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controlplane.exceptions import ApplicationError
from controlplane.roles import Role
from routing_policies import selectors, services
from routing_policies.devices.tokens import hash_secret
from routing_policies.models import Device, Fleet, FleetRouting, PolicyVersion, Rollout
from tests.factories import draft_changed

SLUG = "fleet-a"
ROLLOUT_URL = f"/fleets/{SLUG}/rollout/"
DEVICES_URL = f"/fleets/{SLUG}/devices/"
FLEET_KEY = "fk_test"
VOICE_NORMAL = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}


def text_of(response: Any) -> str:
    return response.content.decode()


def as_user(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


def flash(response: Any) -> list[str]:
    """The messages a redirected-to page shows."""
    return [str(message) for message in response.context["messages"]]


def convergence_cell(page: str, version: int, field: str) -> str:
    """The text of one cell of the convergence table (`<tr data-version="2">` … `acked`)."""
    row = re.search(rf'<tr data-version="{version}"[^>]*>(.*?)</tr>', page, re.S)
    assert row, f"no convergence row for v{version}"
    cell = re.search(rf'data-field="{field}">([^<]*)<', row.group(1))
    assert cell, f"no {field} cell in the v{version} row"
    return cell.group(1).strip()


def device_ids(page: str) -> list[str]:
    return re.findall(r'<tr data-device="([^"]+)"', page)


def open_rollout(fleet: Fleet) -> Rollout | None:
    return selectors.open_rollout(fleet.pk)


@pytest.fixture
def two_versions(fleet: Fleet, publisher: Any) -> Fleet:
    """The fleet with v1 stable and a published v2 (voice/interactive/normal θ 0.8)."""
    draft = services.policy_draft_create(actor=publisher, fleet=fleet)
    services.policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[{**VOICE_NORMAL, "values": {"threshold": 0.8}}],
    )
    services.policy_version_publish(
        actor=publisher, fleet=fleet, revision=draft.revision + 1, note="θ 0.8"
    )
    return fleet


@pytest.fixture
def enrolled(two_versions: Fleet) -> list[Device]:
    """Six devices of the fleet: android and ios, three of them online now."""
    services.fleet_enrollment_key_rotate(actor=None, fleet=two_versions, key=FLEET_KEY)
    devices = []
    for index in range(6):
        platform = "android" if index % 2 == 0 else "ios"
        device, _ = services.device_enroll(
            fleet_key=FLEET_KEY, device_id=f"dev-{index}", platform=platform, model="m1"
        )
        if index < 3:
            services.device_seen(device_pk=device.pk, connected=True)
        devices.append(device)
    return devices


def post(client: Client, action: str, **data: Any) -> Any:
    return client.post(f"/fleets/{SLUG}/{action}/", data)


# --- access -----------------------------------------------------------------------------------

ACTIONS = [
    ("rollout/start", {"version": "2"}),
    ("rollout/advance", {"to_stage": "25"}),
    ("rollout/pause", {}),
    ("rollout/resume", {}),
    ("rollout/complete", {}),
    ("rollout/rollback", {"reason": "no"}),
    ("switch", {"version": "2"}),
    ("cloud-pressure", {"theta_offset": "0.1", "ttl_s": "60"}),
    ("enrollment-key", {}),
    ("devices/dev-0/revoke", {}),
]


@pytest.mark.parametrize("path", [ROLLOUT_URL, DEVICES_URL])
def test_rollout_pages__anonymous__redirected_to_login(
    client: Client, fleet: Fleet, path: str
) -> None:
    # Given an anonymous visitor
    # When they open the page
    response = client.get(path)

    # Then they are sent to the login page, coming back afterwards
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_rollout_action__anonymous__redirected_to_login_and_nothing_started(
    client: Client, two_versions: Fleet
) -> None:
    # Given an anonymous visitor
    # When they post the start form
    response = post(client, "rollout/start", version="2")

    # Then they are sent to log in and no rollout starts
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert open_rollout(two_versions) is None


def test_rollout_page__viewer__sees_stage_and_convergence_without_action_buttons(
    client: Client, enrolled: list[Device], viewer: Any, publisher: Any
) -> None:
    # Given v2 rolling out at 5% over v1 in a fleet of six devices
    fleet = enrolled[0].fleet
    services.rollout_start(actor=publisher, fleet=fleet, version=2)

    # When a viewer opens the rollout page
    response = as_user(client, viewer).get(ROLLOUT_URL)

    # Then they see the versions, the stage, what comes next and the convergence table
    page = text_of(response)
    assert response.status_code == 200
    assert "Rolling out" in page
    assert 'data-stage="5" data-step="current"' in page
    assert 'data-stage="25" data-step="todo"' in page
    assert "at 5% since" in page
    assert "advance to 25%, then 100%, then complete" in page
    on_candidate = selectors.fleet_convergence(fleet)["versions"][0]
    assert convergence_cell(page, 2, "assigned") == str(on_candidate["assigned"])
    assert int(convergence_cell(page, 1, "assigned")) == 6 - on_candidate["assigned"]
    # ... kept live by polling the rollout API
    assert f'data-status-url="/api/v1/fleets/{SLUG}/rollout/"' in page
    assert "js/rollout.js" in page
    # ... but no button that would change anything
    assert "Advance to 25%" not in page
    assert "Roll back to v1" not in page
    assert "Switch every device now" not in page
    assert "Rollout actions need the publisher role" in page


def test_rollout_page__devices_not_acked__counted_and_named_with_what_each_runs(
    client: Client, enrolled: list[Device], viewer: Any, publisher: Any
) -> None:
    # Given v2 at 100% over v1 in a fleet of six devices, of which the first acked v2
    fleet = enrolled[0].fleet
    services.rollout_start(actor=publisher, fleet=fleet, version=2)
    services.rollout_advance(actor=publisher, fleet=fleet, to_stage=100)
    services.device_ack(device_pk=enrolled[0].pk, version=2)
    services.device_ack(device_pk=enrolled[1].pk, version=1)  # an ack of v1 from before

    # When a viewer opens the rollout page
    page = text_of(as_user(client, viewer).get(ROLLOUT_URL))

    # Then it says how many devices have not acked their version, and names them
    behind = selectors.fleet_convergence(fleet)["not_acked"]
    assert behind["count"] == 5
    assert "<strong>5</strong> devices not yet on their assigned version" in page
    named = re.findall(r'<li data-device-id="([^"]+)">', page)
    assert named == [row["device_id"] for row in behind["devices"]]
    assert enrolled[0].device_id not in named
    for row in behind["devices"]:
        runs = "runs v1" if row["device_id"] == enrolled[1].device_id else "no ack yet"
        presence = "online" if row["online"] else "offline"
        assert f"v2 assigned · {runs} · {presence}" in page


@pytest.mark.parametrize("role", [Role.VIEWER, Role.EDITOR])
@pytest.mark.parametrize(("action", "data"), ACTIONS, ids=[a for a, _ in ACTIONS])
def test_rollout_actions__viewer_or_editor_posts__403_and_nothing_changes(
    client: Client,
    enrolled: list[Device],
    publisher: Any,
    make_user: Any,
    role: Role,
    action: str,
    data: dict[str, str],
) -> None:
    # Given v2 rolling out at 5% and a user who may read but not release
    fleet = enrolled[0].fleet
    services.rollout_start(actor=publisher, fleet=fleet, version=2)
    routing_before = FleetRouting.objects.get(fleet=fleet)
    user = make_user(role)

    # When they post an action form
    response = post(as_user(client, user), action, **data)

    # Then it is refused and the rollout, the routing row and the devices are as they were
    assert response.status_code == 403
    assert "You need the publisher role" in text_of(response)
    rollout = open_rollout(fleet)
    assert rollout is not None
    assert (rollout.stage, rollout.state) == (5, Rollout.State.ACTIVE)
    routing = FleetRouting.objects.get(fleet=fleet)
    assert routing.stable_version_id == routing_before.stable_version_id
    assert routing.enrollment_key_hash == hash_secret(FLEET_KEY)
    assert routing.cloud_pressure_until is None
    assert not Device.objects.filter(revoked_at__isnull=False).exists()


# --- rollout transitions ----------------------------------------------------------------------


def test_rollout_start__publisher__rollout_at_5_percent_and_message(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given a fleet with v1 stable and v2 published
    # When the publisher starts rolling out v2
    response = post(as_user(client, publisher), "rollout/start", version="2")

    # Then the page redirects back, says so, and v2 is at 5% over v1
    assert response.status_code == 302
    assert response["Location"] == ROLLOUT_URL
    page = client.get(ROLLOUT_URL)
    assert flash(page) == ["Started rolling out v2 over v1 at 5% of the fleet."]
    rollout = open_rollout(two_versions)
    assert rollout is not None
    assert (rollout.candidate.number, rollout.stable.number, rollout.stage) == (2, 1, 5)
    assert "Advance to 25%" in text_of(page)


def test_rollout_page__open_rollout__shows_its_salt(
    client: Client, two_versions: Fleet, publisher: Any, viewer: Any
) -> None:
    # Given v2 rolling out at 5%
    rollout = services.rollout_start(actor=publisher, fleet=two_versions, version=2)

    # When a viewer opens the rollout page
    page = as_user(client, viewer).get(ROLLOUT_URL)

    # Then it shows the rollout's salt, with how a device's bucket is computed from it
    words = " ".join(re.sub(r"<[^>]+>", " ", text_of(page)).split())
    assert f"Salt {rollout.salt} : a device's bucket is" in words


def test_rollout_advance__same_to_stage_posted_twice__advances_once(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given v2 at 5%
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)
    as_user(client, publisher)

    # When the "Advance to 25%" button is clicked twice (the second a double click)
    first = post(client, "rollout/advance", to_stage="25")
    first_messages = flash(client.get(ROLLOUT_URL))
    second = post(client, "rollout/advance", to_stage="25")

    # Then the rollout is at 25%, not 100%, and the second click says it changed nothing
    assert first.status_code == second.status_code == 302
    rollout = open_rollout(two_versions)
    assert rollout is not None
    assert rollout.stage == 25
    assert rollout.events.filter(action="advanced").count() == 1
    assert first_messages == ["Advanced v2 to 25% of the fleet."]
    assert flash(client.get(ROLLOUT_URL)) == ["v2 is already at 25%."]


def test_rollout_pause_and_resume__publisher__state_follows_and_advance_waits(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given v2 at 5%
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)
    as_user(client, publisher)

    # When the publisher pauses it
    post(client, "rollout/pause")

    # Then it is paused, the page offers Resume, and advancing is refused with a message
    rollout = open_rollout(two_versions)
    assert rollout is not None
    assert rollout.state == Rollout.State.PAUSED
    page = text_of(client.get(ROLLOUT_URL))
    assert "Resume" in page
    assert "resume, then advance to 25%" in page
    refused = post(client, "rollout/advance", to_stage="25")
    assert refused.status_code == 409
    assert "The rollout is paused: resume it before advancing. Nothing was changed." in text_of(
        refused
    )

    # When they resume it
    post(client, "rollout/resume")

    # Then it is active at the same stage again
    rollout = open_rollout(two_versions)
    assert rollout is not None
    assert (rollout.state, rollout.stage) == (Rollout.State.ACTIVE, 5)


def test_rollout_rollback__publisher_with_reason__rolled_back_and_reason_kept(
    client: Client, enrolled: list[Device], publisher: Any
) -> None:
    # Given v2 at 25%
    fleet = enrolled[0].fleet
    services.rollout_start(actor=publisher, fleet=fleet, version=2)
    services.rollout_advance(actor=publisher, fleet=fleet, to_stage=25)

    # When the publisher rolls back with one click, giving a reason
    response = post(as_user(client, publisher), "rollout/rollback", reason="image latency up")

    # Then every device is assigned v1 again and the page says so
    assert response.status_code == 302
    rollout = Rollout.objects.get(fleet=fleet)
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.reason == "image latency up"
    assert selectors.fleet_assignment(fleet.pk).candidate is None
    page = client.get(ROLLOUT_URL)
    assert flash(page) == ["Rolled v2 back: every device returns to v1."]
    assert "rolled back from 25% at" in text_of(page)
    assert convergence_cell(text_of(page), 1, "assigned") == "6"
    assert "image latency up" in text_of(page)


def test_rollout_complete__at_100_percent__candidate_becomes_stable(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given v2 advanced to 100%
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)
    services.rollout_advance(actor=publisher, fleet=two_versions, to_stage=25)
    services.rollout_advance(actor=publisher, fleet=two_versions, to_stage=100)
    as_user(client, publisher)
    assert "Complete: make v2 stable" in text_of(client.get(ROLLOUT_URL))

    # When the publisher completes it
    response = post(client, "rollout/complete")

    # Then v2 is the fleet's stable version
    assert response.status_code == 302
    assert FleetRouting.objects.get(fleet=two_versions).stable_version.number == 2  # type: ignore[union-attr]
    page = client.get(ROLLOUT_URL)
    assert flash(page) == ["Completed: v2 is now the stable version (was v1)."]
    assert 'data-field="stable" title="What every device runs outside a rollout">v2<' in text_of(
        page
    )


def test_rollout_complete__at_5_percent__409_with_message(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given v2 at 5%
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)

    # When the publisher posts Complete anyway (e.g. from a stale page)
    response = post(as_user(client, publisher), "rollout/complete")

    # Then it is refused, saying why, and the rollout goes on
    assert response.status_code == 409
    assert "advance it to 100% before completing" in text_of(response)
    rollout = open_rollout(two_versions)
    assert rollout is not None
    assert rollout.state == Rollout.State.ACTIVE


def test_rollout_start__one_already_open__409_with_message_and_first_kept(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given v2 rolling out, and v3 published meanwhile
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)
    draft = draft_changed(fleet=two_versions, actor=publisher)
    services.policy_version_publish(
        actor=publisher, fleet=two_versions, revision=draft.revision, note="v3"
    )

    # When the publisher tries to start v3
    response = post(as_user(client, publisher), "rollout/start", version="3")

    # Then the page explains the conflict with status 409 and v2's rollout is untouched
    assert response.status_code == 409
    page = text_of(response)
    assert 'class="alert alert-error"' in page
    assert "of v2 is in progress; complete or roll it back first. Nothing was changed." in page
    rollout = open_rollout(two_versions)
    assert rollout is not None
    assert rollout.candidate.number == 2


@pytest.mark.parametrize(
    ("version", "status", "message"),
    [
        ("9", 404, "has no published version 9"),
        ("two", 400, "The version: A valid integer is required."),
        ("1", 409, "v1 is already the fleet&#x27;s stable version"),
    ],
)
def test_rollout_start__bad_version__refused_with_message(
    client: Client,
    two_versions: Fleet,
    publisher: Any,
    version: str,
    status: int,
    message: str,
) -> None:
    # Given a fleet with v1 stable and v2 published
    # When the publisher posts a version that cannot be rolled out
    response = post(as_user(client, publisher), "rollout/start", version=version)

    # Then the page says why, with a fitting status, and nothing starts
    assert response.status_code == status
    assert message in text_of(response)
    assert open_rollout(two_versions) is None


# --- immediate switch and cloud pressure ------------------------------------------------------


def test_fleet_switch__publisher__whole_fleet_on_that_version(
    client: Client, enrolled: list[Device], publisher: Any
) -> None:
    # Given six devices on v1 and v2 published
    fleet = enrolled[0].fleet

    # When the publisher switches the whole fleet to v2, then back to v1
    as_user(client, publisher)
    to_v2 = post(client, "switch", version="2")
    assert flash(client.get(ROLLOUT_URL)) == ["Switched the whole fleet from v1 to v2."]
    assert selectors.fleet_assignment(fleet.pk).stable == 2
    post(client, "switch", version="1")

    # Then every device is assigned v1 again, with no rollout involved
    assert to_v2.status_code == 302
    assert selectors.fleet_assignment(fleet.pk).stable == 1
    assert not Rollout.objects.filter(fleet=fleet).exists()
    assert convergence_cell(text_of(client.get(ROLLOUT_URL)), 1, "assigned") == "6"


def test_fleet_switch__rollout_open__409_with_message(
    client: Client, two_versions: Fleet, publisher: Any
) -> None:
    # Given v2 rolling out
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)

    # When the publisher tries an immediate switch to v2
    response = post(as_user(client, publisher), "switch", version="2")

    # Then it is refused and the fleet's stable version stays v1
    assert response.status_code == 409
    assert "A rollout is in progress: complete or roll it back first." in text_of(response)
    assert selectors.fleet_assignment(two_versions.pk).stable == 1


def test_cloud_pressure__publisher__offset_live_for_the_ttl(
    client: Client, fleet: Fleet, publisher: Any
) -> None:
    # Given a fleet without a nudge
    # When the publisher sends θ +0.15 for 300 s
    response = post(as_user(client, publisher), "cloud-pressure", theta_offset="0.15", ttl_s="300")

    # Then it is stored and the page shows it as live
    assert response.status_code == 302
    routing = FleetRouting.objects.get(fleet=fleet)
    assert routing.cloud_pressure_offset == 0.15
    assert routing.cloud_pressure_until is not None
    page = client.get(ROLLOUT_URL)
    assert flash(page) == ["Sent cloud_pressure θ +0.15 for 300 s to the whole fleet."]
    assert "Live now: θ <strong>+0.15</strong>" in text_of(page)


@pytest.mark.parametrize(
    ("offset", "ttl", "message"),
    [
        ("1.5", "60", "The θ offset: Ensure this value is less than or equal to 1.0."),
        ("0.1", "0", "The duration in seconds: Ensure this value is greater than or equal to 1."),
        ("nan", "60", "The θ offset: A valid number is required."),
    ],
)
def test_cloud_pressure__out_of_range__400_with_message_and_nothing_stored(
    client: Client, fleet: Fleet, publisher: Any, offset: str, ttl: str, message: str
) -> None:
    # Given a fleet without a nudge
    # When the publisher sends a value out of range
    response = post(as_user(client, publisher), "cloud-pressure", theta_offset=offset, ttl_s=ttl)

    # Then the page says what is wrong and nothing is stored
    assert response.status_code == 400
    assert message in text_of(response)
    assert FleetRouting.objects.get(fleet=fleet).cloud_pressure_until is None


# --- history and links ------------------------------------------------------------------------


def test_rollout_page__after_transitions__history_lists_them_newest_first(
    client: Client, two_versions: Fleet, publisher: Any, viewer: Any
) -> None:
    # Given a rollout started, advanced and rolled back by the publisher
    services.rollout_start(actor=publisher, fleet=two_versions, version=2)
    services.rollout_advance(actor=publisher, fleet=two_versions, to_stage=25)
    services.rollout_rollback(actor=publisher, fleet=two_versions, reason="too slow")

    # When a viewer opens the rollout page
    page = text_of(as_user(client, viewer).get(ROLLOUT_URL))

    # Then the history shows each transition with its stages and who did it, newest first
    history = page[page.index("<h2>History</h2>") :]
    actions = re.findall(r'<span class="event event-([a-z_]+)">', history)
    assert actions == ["rolled_back", "advanced", "started"]
    assert "25% → 0%" in history
    assert "5% → 25%" in history
    assert "— → 5%" in history
    assert history.count('<td data-label="Who">publisher</td>') == 3
    assert f'href="/fleets/{SLUG}/audit/"' in page


def test_fleet_page__published_fleet__links_rollout_and_devices_and_shows_stable(
    client: Client, two_versions: Fleet, viewer: Any
) -> None:
    # Given a fleet whose devices run v1 while v2 is the latest
    # When a viewer opens the fleet's matrix
    page = text_of(as_user(client, viewer).get(f"/fleets/{SLUG}/"))

    # Then the header links to the rollout and device pages and says which version devices run
    assert f'href="{ROLLOUT_URL}">Rollout</a>' in page
    assert f'href="{DEVICES_URL}">Devices</a>' in page
    assert re.search(
        rf'<span class="strong">Devices run</span>\s*<a href="/fleets/{SLUG}/\?version=1">v1</a>'
        r" \(stable\): every device.",
        page,
    )


# --- devices ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["dev-0", "dev-1", "dev-2", "dev-3", "dev-4", "dev-5"]),
        ("?online=online", ["dev-0", "dev-1", "dev-2"]),
        ("?online=offline", ["dev-3", "dev-4", "dev-5"]),
        ("?platform=ios", ["dev-1", "dev-3", "dev-5"]),
        ("?platform=android&online=online", ["dev-0", "dev-2"]),
        ("?version=2", []),
        ("?version=1&platform=ios&online=all", ["dev-1", "dev-3", "dev-5"]),
    ],
)
def test_device_list__filters__only_matching_devices(
    client: Client, enrolled: list[Device], viewer: Any, query: str, expected: list[str]
) -> None:
    # Given six devices, android and ios, three online, all on v1
    # When a viewer filters the device list
    response = as_user(client, viewer).get(DEVICES_URL + query)

    # Then exactly the matching devices are listed
    assert response.status_code == 200
    assert device_ids(text_of(response)) == expected


def test_device_list__version_filter_during_rollout__candidate_cohort_and_acks(
    client: Client, enrolled: list[Device], viewer: Any, publisher: Any
) -> None:
    # Given v2 at 25%, and one device of the stable cohort that has acked v1
    fleet = enrolled[0].fleet
    services.rollout_start(actor=publisher, fleet=fleet, version=2)
    services.rollout_advance(actor=publisher, fleet=fleet, to_stage=25)
    assignment = selectors.fleet_assignment(fleet.pk)
    on_v2 = sorted(d.device_id for d in enrolled if assignment.version_for(d.device_id) == 2)
    on_v1 = sorted(d.device_id for d in enrolled if assignment.version_for(d.device_id) == 1)
    services.device_ack(device_pk=Device.objects.get(device_id=on_v1[0]).pk, version=1)

    # When a viewer lists v2's and v1's devices
    as_user(client, viewer)
    v2_page = text_of(client.get(f"{DEVICES_URL}?version=2"))
    v1_page = text_of(client.get(f"{DEVICES_URL}?version=1"))

    # Then v2 lists its cohort and v1 the rest, each showing assigned and acked versions
    assert device_ids(v2_page) == on_v2
    assert device_ids(v1_page) == on_v1
    acked_row = re.search(rf'<tr data-device="{on_v1[0]}">(.*?)</tr>', v1_page, re.S)
    assert acked_row is not None
    assert 'data-field="assigned">v1<' in acked_row.group(1)
    assert 'data-field="acked">v1<' in acked_row.group(1)


def test_device_list__bad_version__400_with_message(
    client: Client, enrolled: list[Device], viewer: Any
) -> None:
    # Given a fleet with devices
    # When the version filter is not a number
    response = as_user(client, viewer).get(f"{DEVICES_URL}?version=abc")

    # Then the page says so instead of listing everything
    assert response.status_code == 400
    assert "The version: A valid integer is required." in text_of(response)
    assert device_ids(text_of(response)) == []


def test_device_list__more_devices__same_number_of_queries(
    client: Client, enrolled: list[Device], viewer: Any
) -> None:
    # Given the list's queries with six devices
    as_user(client, viewer)
    client.get(DEVICES_URL)  # warm the session and role caches
    with CaptureQueriesContext(connection) as six:
        client.get(DEVICES_URL)

    # When twenty more devices enrol
    for index in range(20):
        services.device_enroll(fleet_key=FLEET_KEY, device_id=f"more-{index}", platform="ios")
    with CaptureQueriesContext(connection) as twenty_six:
        page = text_of(client.get(DEVICES_URL))

    # Then the page lists them all with the same number of queries
    assert len(device_ids(page)) == 26
    assert len(twenty_six) == len(six)


def test_device_list__more_than_a_page__count_and_page_links_keep_filters(
    client: Client, enrolled: list[Device], viewer: Any
) -> None:
    # Given 120 iOS devices on top of the six (3 of them iOS)
    for index in range(120):
        Device.objects.create(
            fleet=enrolled[0].fleet,
            device_id=f"ios-{index:03d}",
            token_hash=f"ios{index:061d}",
            platform="ios",
        )
    as_user(client, viewer)

    # When a viewer lists the iOS devices, then follows "Next"
    first = text_of(client.get(f"{DEVICES_URL}?platform=ios"))
    second = text_of(client.get(f"{DEVICES_URL}?platform=ios&page=2"))
    last = text_of(client.get(f"{DEVICES_URL}?platform=ios&page=3"))

    # Then each page shows 50 devices in order, says which of how many, and links its neighbours
    # and every page with the filter kept
    assert device_ids(first) == sorted(d for d in device_ids(first))
    assert len(device_ids(first)) == 50
    assert "Devices 1–50 of 123 matching" in first
    assert '<a class="btn btn-small" href="?platform=ios&amp;page=2" rel="next">Next →</a>' in first
    assert '<a href="?platform=ios&amp;page=3" aria-label="Page 3">3</a>' in first
    assert '<span class="pager-current" aria-current="page">1</span>' in first
    assert device_ids(second)[0] == "ios-047"
    assert "Devices 51–100 of 123 matching" in second
    assert 'href="?platform=ios&amp;page=1" rel="prev">← Previous</a>' in second
    assert "Devices 101–123 of 123 matching" in last
    assert len(device_ids(last)) == 23
    assert set(device_ids(first) + device_ids(second) + device_ids(last)) == {
        d.device_id for d in Device.objects.filter(platform="ios")
    }


def test_device_list__one_page__count_without_page_links(
    client: Client, enrolled: list[Device], viewer: Any
) -> None:
    # Given six devices
    # When a viewer opens the list
    page = text_of(as_user(client, viewer).get(DEVICES_URL))

    # Then it says how many, with no page links
    assert "Devices 1–6 of 6" in page
    assert "Next →" not in page


def test_device_list__viewer__no_revoke_or_new_key_buttons(
    client: Client, enrolled: list[Device], viewer: Any
) -> None:
    # Given a fleet with devices and an enrolment key
    # When a viewer opens the device list
    page = text_of(as_user(client, viewer).get(DEVICES_URL))

    # Then they see the key's prefix but cannot revoke or issue a key
    assert f"{FLEET_KEY}…" in page
    assert "Revoke" not in page
    assert "New enrolment key" not in page


def test_device_revoke__publisher__device_revoked_and_list_keeps_filters(
    client: Client, enrolled: list[Device], publisher: Any
) -> None:
    # Given six enrolled devices
    # When the publisher revokes dev-1 from the ios list
    response = post(as_user(client, publisher), "devices/dev-1/revoke", platform="ios")

    # Then dev-1 is revoked (its token no longer authenticates) and the ios list is shown again
    assert response.status_code == 302
    assert response["Location"] == f"{DEVICES_URL}?platform=ios"
    device = Device.objects.get(device_id="dev-1")
    assert device.revoked_at is not None
    page = client.get(response["Location"])
    assert flash(page) == [
        "Revoked dev-1: its token no longer works and its open connection was closed."
    ]
    row = re.search(r'<tr data-device="dev-1" class="row-revoked">(.*?)</tr>', text_of(page), re.S)
    assert row is not None
    assert "revoked" in row.group(1)
    assert "Revoke</button>" not in row.group(1)


def test_device_revoke__unknown_device__404(
    client: Client, enrolled: list[Device], publisher: Any
) -> None:
    # Given a fleet without a device "ghost"
    # When the publisher posts its revoke form
    response = post(as_user(client, publisher), "devices/ghost/revoke")

    # Then it is not found and nothing is revoked
    assert response.status_code == 404
    assert not Device.objects.filter(revoked_at__isnull=False).exists()


def test_enrollment_key_rotate__publisher__new_key_shown_once_then_only_its_prefix(
    client: Client, enrolled: list[Device], publisher: Any
) -> None:
    # Given a fleet enrolling with fk_test
    as_user(client, publisher)

    # When the publisher asks for a new enrolment key
    response = post(client, "enrollment-key")

    # Then the response shows the new key with a warning, never to be cached
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    page = text_of(response)
    shown = re.search(r"<code class=\"secret\" data-new-key>([^<]+)</code>", page)
    assert shown is not None
    new_key = shown.group(1)
    assert new_key.startswith("fk_")
    assert new_key != FLEET_KEY
    assert "it is shown only this once" in page
    # ... it enrols devices, and the old key no longer does
    services.device_enroll(fleet_key=new_key, device_id="fresh")
    with pytest.raises(ApplicationError):
        services.device_enroll(fleet_key=FLEET_KEY, device_id="stale")
    # ... and the next visit shows only its prefix
    again = text_of(client.get(DEVICES_URL))
    assert new_key not in again
    assert f"{new_key[:10]}…" in again


def test_rollout_page__no_second_version__start_form_explains(
    client: Client, fleet: Fleet, publisher: Any
) -> None:
    # Given a fleet with only v1
    assert PolicyVersion.objects.filter(fleet=fleet).count() == 1

    # When the publisher opens the rollout page
    page = text_of(as_user(client, publisher).get(ROLLOUT_URL))

    # Then there is nothing to start, and the page says what to do
    assert "No rollout yet" in page
    assert "Publish another version to roll it out" in page
    assert "Start rollout at 5%" not in page
