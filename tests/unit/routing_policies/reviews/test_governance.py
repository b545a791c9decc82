"""Change governance: the freeze after an automatic rollback and its release; change requests
and every approval rule (own approval refused, revision-bound approval, roles), in the services,
the API and the pages."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlplane.roles import Role
from routing_policies.models import (
    AuditEntry,
    ChangeRequest,
    ChangeRequestVerdict,
    FleetFreeze,
    PolicyVersion,
)
from routing_policies.reviews import services as reviews
from routing_policies.reviews.notify import review_notifier_register
from routing_policies.services import (
    fleet_switch_version,
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
    rollout_rollback,
    rollout_start,
)
from tests.hostile_json import HOSTILE_PARAMS, Hostile, assert_names, with_field

pytestmark = pytest.mark.django_db

FLEET = "/api/v1/fleets/fleet-a"
EDIT = {
    "task_type": "voice",
    "latency_budget": "interactive",
    "privacy_tier": "normal",
}


@pytest.fixture
def fleet2(fleet: Any, publish_version: Callable[..., Any]) -> Any:
    """fleet-a with v1 stable and v2 published."""
    publish_version(fleet, threshold=0.6)
    return fleet


@pytest.fixture
def reviewer(make_user: Callable[..., Any]) -> Any:
    """A second publisher."""
    return make_user(Role.PUBLISHER, username="reviewer")


def _edit(fleet: Any, actor: Any, revision: int, threshold: float) -> PolicyVersion:
    return policy_draft_update_cells(
        actor=actor,
        fleet=fleet,
        revision=revision,
        edits=[{**EDIT, "values": {"threshold": threshold}}],
    )


@pytest.fixture
def draft(fleet: Any, publisher: Any) -> PolicyVersion:
    """A draft of v1 with θ changed (revision 2)."""
    created = policy_draft_create(actor=publisher, fleet=fleet)
    return _edit(fleet, publisher, created.revision, 0.55)


def _review_publishes(fleet: Any, actor: Any) -> None:
    reviews.review_settings_update(
        actor=actor, fleet=fleet, publish_needs_approval=True, rollout_needs_approval=False
    )


# --- the freeze ------------------------------------------------------------------------------


def test_rollback__by_a_guard__freezes_starts_and_switches(fleet2: Any, publisher: Any) -> None:
    # Given a rollout of v2
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    # When a guard (no actor) rolls it back
    rollout_rollback(actor=None, fleet=fleet2, reason="error rate 9% > 5%")
    # Then the fleet is frozen, audited, and neither a start nor a switch goes through
    freeze = FleetFreeze.objects.get(fleet=fleet2)
    assert freeze.released_at is None
    assert "error rate" in freeze.reason
    assert AuditEntry.objects.filter(action="fleet.frozen", fleet=fleet2).exists()
    for attempt in (
        lambda: rollout_start(actor=publisher, fleet=fleet2, version=2),
        lambda: fleet_switch_version(actor=publisher, fleet=fleet2, version=2),
    ):
        with pytest.raises(Exception) as refused:
            attempt()
        assert getattr(refused.value, "code", None) == "fleet_frozen"


def test_rollout_advance__after_automatic_rollback__answers_fleet_frozen(
    fleet2: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    # Given a rollout of v2 that a guard rolled back (the fleet is frozen, no rollout open)
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=None, fleet=fleet2, reason="error rate 9% > 5%")

    # When a publisher presses "advance" through the API
    advanced = client_as(publisher).post(f"{FLEET}/rollout/advance", {}, format="json")

    # Then the answer is the freeze, as docs/governance.md promises, not "no rollout"
    assert advanced.status_code == 409
    assert advanced.json()["error"]["code"] == "fleet_frozen"
    assert "acknowledge" in advanced.json()["error"]["message"]


def test_rollout_advance__no_rollout_and_not_frozen__answers_no_rollout(
    fleet2: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    # Given a fleet with no rollout and no freeze
    # When "advance" is pressed
    advanced = client_as(publisher).post(f"{FLEET}/rollout/advance", {}, format="json")

    # Then it says there is nothing to advance
    assert advanced.status_code == 409
    assert advanced.json()["error"]["code"] == "no_rollout"


def test_rollback__by_a_person__does_not_freeze(fleet2: Any, publisher: Any) -> None:
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=publisher, fleet=fleet2, reason="changed my mind")
    assert not FleetFreeze.objects.exists()
    rollout_start(actor=publisher, fleet=fleet2, version=2)  # not refused


def test_rollback__explicitly_not_automatic__does_not_freeze(fleet2: Any, publisher: Any) -> None:
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=None, fleet=fleet2, automatic=False)
    assert not FleetFreeze.objects.exists()


def test_freeze_release__with_a_note__lets_rollouts_start(fleet2: Any, publisher: Any) -> None:
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=None, fleet=fleet2, reason="p95 too high")
    reviews.fleet_freeze_release(actor=publisher, fleet=fleet2, note="cloud region recovered")
    freeze = FleetFreeze.objects.get()
    assert freeze.released_by_name == publisher.username
    assert AuditEntry.objects.filter(action="fleet.unfrozen").exists()
    assert rollout_start(actor=publisher, fleet=fleet2, version=2).is_open


def test_freeze__api__shows_in_status_and_refuses_editors_and_blank_notes(
    fleet2: Any, publisher: Any, editor: Any, client_as: Callable[[Any], APIClient]
) -> None:
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=None, fleet=fleet2, reason="p95 too high")
    api = client_as(publisher)
    assert api.get(f"{FLEET}/rollout/").json()["freeze"]["reason"] == "p95 too high"
    assert api.get(f"{FLEET}/freeze").json()["frozen"] is True
    started = api.post(f"{FLEET}/rollout/start", {"version": 2}, format="json")
    assert started.status_code == 409
    assert started.json()["error"]["code"] == "fleet_frozen"
    assert client_as(editor).post(f"{FLEET}/freeze/release", {"note": "ok"}).status_code == 403
    blank = api.post(f"{FLEET}/freeze/release", {"note": "   "}, format="json")
    assert blank.status_code == 400
    assert blank.json()["error"]["details"][0]["field"] == "note"
    released = api.post(f"{FLEET}/freeze/release", {"note": "checked"}, format="json")
    assert released.status_code == 200
    assert released.json()["frozen"] is False
    assert api.get(f"{FLEET}/rollout/").json()["freeze"] is None


def test_freeze__every_fleet_page__shows_the_banner_and_releases(
    fleet2: Any, publisher: Any, viewer: Any
) -> None:
    rollout_start(actor=publisher, fleet=fleet2, version=2)
    rollout_rollback(actor=None, fleet=fleet2, reason="p95 too high")
    browser = Client()
    browser.force_login(viewer)
    for page in ("/fleets/fleet-a/", "/fleets/fleet-a/rollout/", "/fleets/fleet-a/reviews/"):
        html = browser.get(page).content.decode()
        assert "Rollouts of fleet-a are frozen" in html, page
        assert "p95 too high" in html, page
        assert "Acknowledge and release" not in html  # viewers cannot release
    assert "are frozen" not in browser.get("/fleets/").content.decode()
    browser.force_login(publisher)
    assert "Acknowledge and release" in browser.get("/fleets/fleet-a/").content.decode()
    answer = browser.post(
        "/fleets/fleet-a/freeze/release/", {"note": "checked", "next": "/fleets/fleet-a/"}
    )
    assert answer.status_code == 302
    assert answer["Location"] == "/fleets/fleet-a/"
    assert "are frozen" not in browser.get("/fleets/fleet-a/").content.decode()


# --- change requests: the rules ---------------------------------------------------------------


def test_publish__fleet_reviews_publishes__refused_without_approval(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    _review_publishes(fleet, publisher)
    with pytest.raises(Exception) as refused:
        policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision, note="x")
    assert refused.value.code == "approval_required"  # type: ignore[attr-defined]
    assert PolicyVersion.objects.filter(fleet=fleet, number=2).count() == 0


def test_change_request__approved_by_another__publishes_normally(
    fleet: Any, publisher: Any, reviewer: Any, draft: PolicyVersion
) -> None:
    _review_publishes(fleet, publisher)
    notified: list[dict[str, Any]] = []
    review_notifier_register("test", lambda fleet_id, body: notified.append(body))
    request = reviews.change_request_open(
        actor=publisher, fleet=fleet, kind="publish", note="θ down"
    )
    reviews.change_request_approve(
        actor=reviewer, fleet=fleet, request_id=request.pk, revision=draft.revision, note="fine"
    )
    version = reviews.change_request_publish(
        actor=publisher, fleet=fleet, request_id=request.pk, revision=draft.revision
    )
    assert version.number == 2
    assert version.note == "θ down"
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.DONE
    assert request.version_number == 2
    kinds = [b["kind"] for b in notified]
    assert kinds == [
        "change_request.opened",
        "change_request.approved",
        "change_request.published",
    ]
    review_notifier_register("test", lambda fleet_id, body: None)


def test_change_request__own_approval__refused(
    fleet: Any, publisher: Any, draft: PolicyVersion
) -> None:
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    with pytest.raises(Exception) as refused:
        reviews.change_request_approve(
            actor=publisher, fleet=fleet, request_id=request.pk, revision=draft.revision
        )
    assert refused.value.code == "own_change_request"  # type: ignore[attr-defined]
    assert not ChangeRequestVerdict.objects.exists()


def test_change_request__edit_after_approval__withdraws_it(
    fleet: Any, publisher: Any, reviewer: Any, draft: PolicyVersion
) -> None:
    _review_publishes(fleet, publisher)
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    reviews.change_request_approve(
        actor=reviewer, fleet=fleet, request_id=request.pk, revision=draft.revision
    )
    # When the author edits the draft after the approval
    edited = _edit(fleet, publisher, draft.revision, 0.5)
    # Then neither the request's publish nor the normal publish goes through
    with pytest.raises(Exception) as refused:
        reviews.change_request_publish(
            actor=publisher, fleet=fleet, request_id=request.pk, revision=edited.revision
        )
    assert refused.value.code == "approval_stale"  # type: ignore[attr-defined]
    with pytest.raises(Exception) as refused:
        policy_version_publish(actor=publisher, fleet=fleet, revision=edited.revision, note="x")
    assert refused.value.code == "approval_stale"  # type: ignore[attr-defined]
    # And an approval of the new revision lets it through
    reviews.change_request_approve(
        actor=reviewer, fleet=fleet, request_id=request.pk, revision=edited.revision
    )
    assert (
        policy_version_publish(
            actor=publisher, fleet=fleet, revision=edited.revision, note="x"
        ).number
        == 2
    )


def test_change_request__stale_revision_review__refused(
    fleet: Any, publisher: Any, reviewer: Any, draft: PolicyVersion
) -> None:
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    with pytest.raises(Exception) as refused:
        reviews.change_request_approve(
            actor=reviewer, fleet=fleet, request_id=request.pk, revision=draft.revision - 1
        )
    assert refused.value.code == "stale_revision"  # type: ignore[attr-defined]


def test_change_request__rejection__blocks_publish_until_a_new_revision(
    fleet: Any, publisher: Any, reviewer: Any, make_user: Callable[..., Any], draft: PolicyVersion
) -> None:
    _review_publishes(fleet, publisher)
    third = make_user(Role.PUBLISHER, username="third")
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    reviews.change_request_approve(
        actor=third, fleet=fleet, request_id=request.pk, revision=draft.revision
    )
    reviews.change_request_reject(
        actor=reviewer, fleet=fleet, request_id=request.pk, revision=draft.revision, note="no"
    )
    with pytest.raises(Exception) as refused:
        policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision, note="x")
    assert "rejected by reviewer" in str(refused.value)


def test_change_request__reject_without_note__refused(
    fleet: Any, publisher: Any, reviewer: Any, draft: PolicyVersion
) -> None:
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    with pytest.raises(Exception) as refused:
        reviews.change_request_reject(
            actor=reviewer, fleet=fleet, request_id=request.pk, revision=draft.revision, note=""
        )
    assert refused.value.details[0]["field"] == "note"  # type: ignore[attr-defined]


def test_rollout_start__fleet_reviews_rollouts__needs_an_approved_request(
    fleet2: Any, publisher: Any, reviewer: Any
) -> None:
    reviews.review_settings_update(
        actor=publisher, fleet=fleet2, publish_needs_approval=False, rollout_needs_approval=True
    )
    with pytest.raises(Exception) as refused:
        rollout_start(actor=publisher, fleet=fleet2, version=2)
    assert refused.value.code == "approval_required"  # type: ignore[attr-defined]
    request = reviews.change_request_open(
        actor=publisher, fleet=fleet2, kind="rollout_start", version=2, note="v2 to 5%"
    )
    revision = PolicyVersion.objects.get(fleet=fleet2, number=2).revision
    reviews.change_request_approve(
        actor=reviewer, fleet=fleet2, request_id=request.pk, revision=revision
    )
    assert rollout_start(actor=publisher, fleet=fleet2, version=2).is_open
    request.refresh_from_db()
    assert request.state == ChangeRequest.State.DONE


# --- change requests: API --------------------------------------------------------------------


def _open_api(api: APIClient) -> Any:
    return api.post(
        f"{FLEET}/change-requests/", {"kind": "publish", "note": "θ down"}, format="json"
    )


def test_change_request_api__open_approve_publish__as_two_publishers(
    fleet: Any,
    publisher: Any,
    reviewer: Any,
    draft: PolicyVersion,
    client_as: Callable[[Any], APIClient],
) -> None:
    _review_publishes(fleet, publisher)
    author, other = client_as(publisher), client_as(reviewer)
    opened = _open_api(author)
    assert opened.status_code == 201, opened.json()
    body = opened.json()
    assert body["status"] == "pending"
    assert body["diff"]["changed_cells"] == 1
    cr = f"{FLEET}/change-requests/{body['id']}"
    own = author.post(f"{cr}/approve", {"revision": body["revision"]}, format="json")
    assert own.status_code == 409
    assert own.json()["error"]["code"] == "own_change_request"
    stale = other.post(f"{cr}/approve", {"revision": body["revision"] + 5}, format="json")
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_revision"
    assert other.get("/api/v1/change-requests/mine").json()["to_review"][0]["id"] == body["id"]
    approved = other.post(f"{cr}/approve", {"revision": body["revision"], "note": "ok"})
    assert approved.status_code == 200
    assert approved.json()["status"] == "approved"
    again = other.post(f"{cr}/approve", {"revision": body["revision"]}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "duplicate"
    published = author.post(f"{cr}/publish", {"revision": body["revision"]}, format="json")
    assert published.status_code == 201
    assert published.json()["version"] == 2
    assert author.get(f"{cr}/").json()["status"] == "done"


def test_change_request_api__roles__viewers_read_editors_open_publishers_review(
    fleet: Any,
    publisher: Any,
    editor: Any,
    viewer: Any,
    draft: PolicyVersion,
    client_as: Callable[[Any], APIClient],
) -> None:
    assert _open_api(client_as(viewer)).status_code == 403
    opened = _open_api(client_as(editor))
    assert opened.status_code == 201
    cr = f"{FLEET}/change-requests/{opened.json()['id']}"
    assert client_as(viewer).get(f"{cr}/").status_code == 200
    assert client_as(editor).post(f"{cr}/approve", {"revision": 2}).status_code == 403
    settings = client_as(editor).put(
        f"{FLEET}/review-settings",
        {"publish_needs_approval": True, "rollout_needs_approval": False},
        format="json",
    )
    assert settings.status_code == 403
    assert client_as(None).get(f"{cr}/").status_code in (401, 403)


def test_change_request_api__second_open_request__duplicate(
    fleet: Any, publisher: Any, draft: PolicyVersion, client_as: Callable[[Any], APIClient]
) -> None:
    api = client_as(publisher)
    assert _open_api(api).status_code == 201
    second = _open_api(api)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "duplicate"
    assert ChangeRequest.objects.count() == 1


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("change-requests/", {"kind": "publish", "note": "x" * 2001}, "note"),
        ("change-requests/", {"note": "x", "kind": "delete"}, "kind"),
        ("change-requests/", {"note": "x", "kind": "switch", "version": 0}, "version"),
        ("change-requests/", {"note": "x", "kind": "switch", "version": "2"}, "version"),
        ("change-requests/", {}, "kind"),
        ("change-requests/", {"kind": "publish"}, "note"),
        ("change-requests/", {"kind": "switch", "note": "x"}, "version"),
        ("review-settings", {"publish_needs_approval": "yes", "rollout_needs_approval": 1}, None),
        ("freeze/release", {"note": 5}, "note"),
    ],
    ids=[
        *("oversized", "unknown-kind", "out-of-range", "string-number", "missing-kind"),
        *("missing-note", "missing-version", "not-bool", "note-not-text"),
    ],
)
def test_governance_api__bad_input__400_naming_the_field_nothing_stored(
    fleet: Any,
    publisher: Any,
    draft: PolicyVersion,
    client_as: Callable[[Any], APIClient],
    path: str,
    body: dict[str, Any],
    field: str | None,
) -> None:
    api = client_as(publisher)
    method = api.put if path == "review-settings" else api.post
    answer = method(f"{FLEET}/{path}", body, format="json")
    assert answer.status_code == 400, answer.content
    named = {d["field"] for d in answer.json()["error"]["details"]}
    assert field is None or field in named, named
    assert not ChangeRequest.objects.exists()


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_change_request_api__hostile_note__refused_naming_it(
    fleet: Any, publisher: Any, draft: PolicyVersion, api_client: APIClient, hostile: Hostile
) -> None:
    api_client.force_authenticate(publisher)
    answer = api_client.post(
        f"{FLEET}/change-requests/",
        data=with_field({"kind": "publish"}, "note", hostile.raw),
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert_names(answer.json()["error"], "note", hostile)
    assert not ChangeRequest.objects.exists()


@pytest.mark.parametrize("hostile", HOSTILE_PARAMS)
def test_verdict_api__hostile_revision__refused_naming_it(
    fleet: Any,
    publisher: Any,
    reviewer: Any,
    draft: PolicyVersion,
    api_client: APIClient,
    hostile: Hostile,
) -> None:
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    api_client.force_authenticate(reviewer)
    answer = api_client.post(
        f"{FLEET}/change-requests/{request.pk}/approve",
        data=with_field({}, "revision", hostile.raw),
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert_names(answer.json()["error"], "revision", hostile)
    assert not ChangeRequestVerdict.objects.exists()


def test_change_request_api__unknown_request__404(
    fleet: Any, publisher: Any, client_as: Callable[[Any], APIClient]
) -> None:
    answer = client_as(publisher).post(f"{FLEET}/change-requests/999/approve", {"revision": 1})
    assert answer.status_code == 404


# --- change requests: pages ------------------------------------------------------------------


def test_change_request_pages__open_approve_publish__as_two_publishers(
    fleet: Any, publisher: Any, reviewer: Any, draft: PolicyVersion
) -> None:
    _review_publishes(fleet, publisher)
    author, other = Client(), Client()
    author.force_login(publisher)
    other.force_login(reviewer)
    opened = author.post("/fleets/fleet-a/reviews/open/", {"kind": "publish", "note": "θ down"})
    assert opened.status_code == 302
    page = opened["Location"]
    html = author.get(page).content.decode()
    assert "you cannot approve your own" in html
    assert "Approve</button>" not in html
    request = ChangeRequest.objects.get()
    own = author.post(f"{page}approve/", {"revision": draft.revision})
    assert own.status_code == 409
    assert "another publisher" in own.content.decode()
    assert f"#{request.pk}" in other.get("/reviews/").content.decode()
    stale = other.post(f"{page}approve/", {"revision": draft.revision - 1})
    assert stale.status_code == 409
    assert "revision" in stale.content.decode()
    assert other.post(f"{page}approve/", {"revision": draft.revision}).status_code == 302
    assert "approved" in author.get(page).content.decode()
    published = author.post(f"{page}publish/", {"revision": draft.revision, "note": "θ down"})
    assert published.status_code == 302
    assert PolicyVersion.objects.filter(fleet=fleet, number=2).exists()


def test_change_request_pages__viewer__cannot_open_or_review(
    fleet: Any, publisher: Any, viewer: Any, draft: PolicyVersion
) -> None:
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    browser = Client()
    browser.force_login(viewer)
    assert browser.get(f"/fleets/fleet-a/reviews/{request.pk}/").status_code == 200
    assert browser.post("/fleets/fleet-a/reviews/open/", {"note": "x"}).status_code == 403
    approve = browser.post(f"/fleets/fleet-a/reviews/{request.pk}/approve/", {"revision": 2})
    assert approve.status_code == 403


def test_change_request_pages__comment_and_reject_without_note__added_then_refused_naming_it(
    fleet: Any, publisher: Any, reviewer: Any, draft: PolicyVersion
) -> None:
    # Given an open request, and another publisher on its page
    request = reviews.change_request_open(actor=publisher, fleet=fleet, kind="publish", note="x")
    page = f"/fleets/fleet-a/reviews/{request.pk}/"
    browser = Client()
    browser.force_login(reviewer)

    # When they comment through the page's form
    commented = browser.post(f"{page}comment/", {"body": "looks right"})

    # Then the comment is in the thread
    assert commented.status_code == 302
    assert "looks right" in browser.get(page).content.decode()

    # When they reject without a note
    rejected = browser.post(f"{page}reject/", {"revision": draft.revision, "note": ""})

    # Then the page says the note is missing, and no verdict is stored
    assert rejected.status_code == 400
    assert "Note:" in rejected.content.decode()
    assert not ChangeRequestVerdict.objects.exists()
