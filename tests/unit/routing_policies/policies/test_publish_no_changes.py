"""A draft identical to a published version is not published again (issue 22): the API answers
409 `no_changes`, the page disables Publish and says why, and a review or a schedule that
publishes goes through the same check. Nothing is stored by a refusal."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.exceptions import Conflict
from routing_policies.models import AuditEntry, PolicyVersion
from routing_policies.reviews import services as reviews
from routing_policies.schedules import services as schedules
from routing_policies.services import (
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
)
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

FLEET = "/api/v1/fleets/fleet-a"
EDIT = {"task_type": "voice", "latency_budget": "interactive", "privacy_tier": "normal"}
ClientAs = Callable[[Any], APIClient]


def _edit(fleet: Any, actor: Any, revision: int, **values: Any) -> PolicyVersion:
    return policy_draft_update_cells(
        actor=actor, fleet=fleet, revision=revision, edits=[{**EDIT, "values": values}]
    )


def _theta(fleet: Any) -> float:
    cell = PolicyVersion.objects.get(fleet=fleet, number=1).cells.get(
        task_type="voice", latency_budget="interactive", privacy_tier="normal"
    )
    return float(cell.threshold)


def _stored() -> tuple[int, int]:
    return PolicyVersion.objects.filter(published_at__isnull=False).count(), (
        AuditEntry.objects.count()
    )


def test_publish_api__draft_unchanged__409_no_changes_nothing_published(
    fleet: Any, publisher: Any, client_as: ClientAs
) -> None:
    # Given a draft just started from v1 (no cell changed)
    policy_draft_create(actor=publisher, fleet=fleet)
    before = _stored()

    # When a publisher publishes it
    response = client_as(publisher).post(
        f"{FLEET}/draft/publish/", {"revision": 1, "note": "same again"}, format="json"
    )

    # Then 409 no_changes says it is identical to v1, and no version or audit entry is added
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "no_changes"
    assert "identical to v1" in error["message"]
    assert _stored() == before


def test_publish_api__draft_changed_then_changed_back__409_no_changes(
    fleet: Any, publisher: Any, client_as: ClientAs
) -> None:
    # Given a draft whose θ was changed and then set back to v1's value (revision 3)
    policy_draft_create(actor=publisher, fleet=fleet)
    theta = _theta(fleet)
    _edit(fleet, publisher, 1, threshold=0.42 if theta != 0.42 else 0.43)
    _edit(fleet, publisher, 2, threshold=theta)
    before = _stored()

    # When it is published
    response = client_as(publisher).post(
        f"{FLEET}/draft/publish/", {"revision": 3, "note": "back"}, format="json"
    )

    # Then it is refused as unchanged
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "no_changes"
    assert _stored() == before


def test_publish_api__one_cell_changed__201_new_version(
    fleet: Any, publisher: Any, client_as: ClientAs
) -> None:
    # Given a draft with one θ changed
    policy_draft_create(actor=publisher, fleet=fleet)
    _edit(fleet, publisher, 1, threshold=0.42 if _theta(fleet) != 0.42 else 0.43)

    # When it is published
    response = client_as(publisher).post(
        f"{FLEET}/draft/publish/", {"revision": 2, "note": "θ"}, format="json"
    )

    # Then v2 is published
    assert response.status_code == 201, response.content
    assert response.json()["version"] == 2


def test_publish__draft_identical_to_the_latest_not_its_base__409_names_the_latest(
    fleet: Any, publisher: Any, publish_version: Callable[..., Any]
) -> None:
    # Given v2 (θ 0.61) published, then a draft started from v1 and given v2's θ
    publish_version(fleet, threshold=0.61)
    draft = policy_draft_create(actor=publisher, fleet=fleet, from_number=1)
    _edit(fleet, publisher, draft.revision, threshold=0.61)

    # When it is published
    with pytest.raises(Conflict) as refused:
        policy_version_publish(actor=publisher, fleet=fleet, revision=draft.revision + 1, note="x")

    # Then it is refused as a copy of v2
    assert refused.value.code == "no_changes"
    assert "identical to v2" in str(refused.value)
    assert not PolicyVersion.objects.filter(fleet=fleet, number=3).exists()


def _page(client: Client, user: Any) -> str:
    client.login(username=user.username, password=PASSWORD)
    response = client.get("/fleets/fleet-a/")
    assert response.status_code == 200
    return response.content.decode()


def test_fleet_page__draft_unchanged__publish_disabled_and_says_why(
    fleet: Any, publisher: Any, client: Client
) -> None:
    # Given a draft just started from v1
    policy_draft_create(actor=publisher, fleet=fleet)

    # When a publisher opens the fleet page
    text = _page(client, publisher)

    # Then Publish is disabled and the page says there is nothing to publish, and why
    assert "Nothing to publish: this draft is identical to v1, the version it started from." in (
        text
    )
    assert 'class="btn btn-publish" disabled' in text


def test_fleet_page__draft_changed__publish_enabled(
    fleet: Any, publisher: Any, client: Client
) -> None:
    # Given a draft with one θ changed
    policy_draft_create(actor=publisher, fleet=fleet)
    _edit(fleet, publisher, 1, threshold=0.42 if _theta(fleet) != 0.42 else 0.43)

    # When a publisher opens the fleet page
    text = _page(client, publisher)

    # Then Publish is enabled and counts the change
    assert "Nothing to publish" not in text
    assert 'class="btn btn-publish">' in text
    assert "1 cell changed since v1" in text


def test_fleet_page__publish_unchanged_draft_posted__409_banner_nothing_published(
    fleet: Any, publisher: Any, client: Client
) -> None:
    # Given a draft just started from v1, and a publisher on the page
    policy_draft_create(actor=publisher, fleet=fleet)
    client.login(username=publisher.username, password=PASSWORD)
    before = _stored()

    # When the publish form is posted anyway (a page opened before, a crafted request)
    response = client.post(
        "/fleets/fleet-a/draft/publish/", {"revision": "1", "note": "same again"}
    )

    # Then the page says there is nothing to publish, and no version is added
    assert response.status_code == 409
    assert "Nothing to publish: the draft is identical to v1" in response.content.decode()
    assert _stored() == before


def test_change_request_publish__draft_unchanged__409_no_changes(
    fleet: Any, publisher: Any, make_user: Callable[..., Any]
) -> None:
    # Given a fleet that reviews publishes, and an approved request for an unchanged draft
    from controlplane.roles import Role

    reviewer = make_user(Role.PUBLISHER, username="reviewer")
    reviews.review_settings_update(
        actor=publisher, fleet=fleet, publish_needs_approval=True, rollout_needs_approval=False
    )
    policy_draft_create(actor=publisher, fleet=fleet)
    request = reviews.change_request_open(
        actor=publisher, fleet=fleet, kind="publish", note="same again"
    )
    reviews.change_request_approve(actor=reviewer, fleet=fleet, request_id=request.pk, revision=1)

    # When the request is published
    with pytest.raises(Conflict) as refused:
        reviews.change_request_publish(
            actor=publisher, fleet=fleet, request_id=request.pk, revision=1
        )

    # Then the one publish check refuses it, and no v2 exists
    assert refused.value.code == "no_changes"
    assert not PolicyVersion.objects.filter(fleet=fleet, number=2).exists()


def test_scheduled_publish__draft_unchanged__skipped_and_says_why(
    fleet: Any, publisher: Any
) -> None:
    # Given a publish scheduled for an unchanged draft
    policy_draft_create(actor=publisher, fleet=fleet)
    schedule = schedules.scheduled_change_create(
        actor=publisher,
        fleet=fleet,
        kind="publish",
        run_at=timezone.now() + timedelta(seconds=60),
        params={"note": "same again"},
    )

    # When it comes due
    schedules.scheduled_changes_run_due(now=timezone.now() + timedelta(minutes=5))

    # Then it did not run, and says there was nothing to publish
    schedule.refresh_from_db()
    assert schedule.state == "skipped"
    assert "Nothing to publish" in schedule.outcome
    assert not PolicyVersion.objects.filter(fleet=fleet, number=2).exists()
