"""Finding one's way (issue 22): every fleet page shows the fleet's navigation with the page
shown marked; the superuser is badged "admin" and finds Django admin; the dashboard's firing
alerts open the alerts page; the schedule and review forms offer the fleet's real versions
and take only the chosen kind's fields, with or without JavaScript.

(The per-role link walk over the whole URLconf runs in Chromium: tests/e2e/test_navigation.py.)
"""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from routing_policies.models import ChangeRequest, ScheduledChange
from routing_policies.services import policy_draft_create
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PAGES = "/fleets/fleet-a"


def _page(user: Any, path: str) -> str:
    browser = Client()
    browser.force_login(user)
    answer = browser.get(path)
    assert answer.status_code == 200, path
    return answer.content.decode()


def _current(html: str) -> list[str]:
    """The labels of the navigation's links marked as the page shown."""
    return re.findall(r'<a href="[^"]+" aria-current="page">([^<]+)</a>', html)


@pytest.mark.parametrize(
    ("path", "marked"),
    [
        ("/", "Matrix"),
        ("/versions/", "Versions"),
        ("/alerts/", "Alerts"),
        ("/reviews/", "Change requests"),
        ("/schedules/", "Schedules"),
        ("/segments/", "Segments"),
        ("/lab/backtests/", "Backtests"),
        ("/dashboard/", "Dashboard"),
    ],
)
def test_fleet_nav__any_fleet_page__links_every_fleet_page_and_marks_this_one(
    fleet: Any, viewer: Any, path: str, marked: str
) -> None:
    # Given a viewer / When they open a page of the fleet
    html = _page(viewer, f"{PAGES}{path}")
    # Then the navigation links the fleet's pages, this one marked as the page shown
    pages = ("alerts", "reviews", "schedules", "segments", "lab/backtests", "rollout", "dashboard")
    for page in pages:
        assert f'href="{PAGES}/{page}/"' in html
    assert _current(html) == [marked]


def test_fleet_nav__a_change_request__marks_change_requests(
    fleet: Any, publisher: Any, editor: Any
) -> None:
    # Given an open change request of the fleet's draft
    from routing_policies.reviews.services import change_request_open

    policy_draft_create(actor=editor, fleet=fleet)
    opened = change_request_open(actor=editor, fleet=fleet, kind="publish", note="why")
    # When it is opened / Then its section of the navigation is marked
    assert _current(_page(publisher, f"{PAGES}/reviews/{opened.pk}/")) == ["Change requests"]


def test_fleet_reviews_page__breadcrumb_and_title__say_change_requests_as_the_bar_does(
    fleet: Any, viewer: Any
) -> None:
    # Given a viewer / When they open the fleet's change requests
    html = _page(viewer, f"{PAGES}/reviews/")
    # Then the breadcrumb and the window title name it as the navigation does
    assert '<span class="crumb-sep" aria-hidden="true">/</span><span>change requests</span>' in html
    assert f"<title>{fleet.slug} change requests" in html


def test_top_bar__superuser__admin_badge_and_django_admin_link(fleet: Any) -> None:
    # Given a superuser / When they open the fleet list
    superuser = UserFactory(is_superuser=True, is_staff=True)
    html = _page(superuser, "/")
    # Then they are badged admin (not publisher) and find Django admin
    assert re.search(r'class="role-chip role-admin"[^>]*>admin</span>', html)
    assert 'href="/admin/"' in html


def test_top_bar__publisher__no_django_admin_link(fleet: Any, publisher: Any) -> None:
    html = _page(publisher, "/")
    assert re.search(r'class="role-chip role-publisher"[^>]*>publisher</span>', html)
    assert 'href="/admin/"' not in html


def test_dashboard__firing_alerts_card__opens_the_alerts_page(fleet: Any, viewer: Any) -> None:
    html = _page(viewer, f"{PAGES}/dashboard/")
    assert "{#" not in html  # no template comment shows as text beside the card
    card = re.search(r'<a class="figure figure-alerts[^"]*"[^>]*>', html)
    assert card is not None
    assert f'href="{PAGES}/alerts/"' in card.group(0)


def _options(html: str, form_id: str) -> list[str]:
    form = re.search(rf"<form[^>]*{form_id}.*?</form>", html, re.S)
    assert form is not None
    select = re.search(r'<select name="version">(.*?)</select>', form.group(0), re.S)
    assert select is not None, "the version is chosen from a list"
    return re.findall(r'<option value="(\d+)"', select.group(1))


def test_schedule_and_review_forms__two_versions_published__offer_exactly_them(
    fleet: Any, publisher: Any, publish_version: Callable[..., Any]
) -> None:
    # Given v1 and v2 published
    publish_version(fleet, threshold=0.6)
    # When the publisher opens the schedules and the change requests pages
    schedules = _page(publisher, f"{PAGES}/schedules/")
    reviews = _page(publisher, f"{PAGES}/reviews/")
    # Then both forms offer the published versions, newest first, and nothing else
    assert _options(schedules, 'id="schedule-form"') == ["2", "1"]
    assert _options(reviews, "data-kind-form") == ["2", "1"]
    # And each kind-specific field says which kinds it is for
    assert re.search(r'data-kinds="rollout_start switch"', schedules)
    assert re.search(r'data-kinds="cloud_pressure"', schedules)


def test_schedule_form__no_javascript_other_kinds_fields_filled__only_the_chosen_kinds_kept(
    fleet: Any, publisher: Any, publish_version: Callable[..., Any]
) -> None:
    # Given a form sent without JavaScript: every field shown, some filled for other kinds
    publish_version(fleet, threshold=0.6)
    browser = Client()
    browser.force_login(publisher)
    # When a switch to v2 is scheduled with a θ offset typed (wrongly) for cloud pressure
    answer = browser.post(
        f"{PAGES}/schedules/new/",
        {
            "kind": "switch",
            "version": "2",
            "run_at": "2099-06-01T14:00",
            "time_zone": "UTC",
            "theta_offset": "not a number",
            "note": "a release note",
            "to_stage": "25",
        },
    )
    # Then the switch is scheduled with its own field only
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert ScheduledChange.objects.get().params == {"version": 2}


def test_schedule_form__rollout_start_without_version__refused_naming_the_version(
    fleet: Any, publisher: Any
) -> None:
    browser = Client()
    browser.force_login(publisher)
    answer = browser.post(
        f"{PAGES}/schedules/new/",
        {"kind": "rollout_start", "run_at": "2099-06-01T14:00", "time_zone": "UTC"},
    )
    assert answer.status_code == 400
    assert "version" in answer.content.decode()
    assert not ScheduledChange.objects.exists()


def test_review_form__publish_with_a_version_posted__the_version_is_not_taken(
    fleet: Any, editor: Any
) -> None:
    # Given a draft, and a form sent without JavaScript with the version field filled
    policy_draft_create(actor=editor, fleet=fleet)
    browser = Client()
    browser.force_login(editor)
    # When the editor asks for review of the draft's publication
    answer = browser.post(
        f"{PAGES}/reviews/open/", {"kind": "publish", "version": "1", "note": "why"}
    )
    # Then the request is for the draft, not for v1
    assert answer.status_code == 302, answer.content.decode()[:2000]
    opened = ChangeRequest.objects.get()
    assert opened.kind == "publish"
    assert opened.version.number is None
