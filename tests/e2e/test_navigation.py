"""Every page can be reached (issue 22), in a real Chromium over the untouched demo.

The page routes are read from the URLconf itself, never listed by hand: every route outside
`/api/` (and the Django admin site, as its index), its parameters filled from seeded rows. A
route is a page when the superuser's GET of it answers HTML; a route that answers 405 is an
action behind a form (a POST), and `healthz` or `/metrics` answer no HTML. Each role may open
the pages its GET answers 200 (403, or the admin site's redirect to its own login, means not).

Then, as each demo role, the test follows `<a href>` links only, from the fleet list to the
fleet page and on from there, and asserts that every page the role may open is at most two
clicks from the fleet page, that no page links a page the role may not open, and that the
fleet's navigation marks the page shown (`aria-current="page"` and a visible difference).
Screenshots at 1366 px and 390 px of the pages this issue changed are kept in
`var/artifacts/navigation/` (the path is printed).
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.urls.exceptions import Resolver404
from playwright.sync_api import Page, expect

from routing_policies.demo import DEMO_FLEET, DEMO_FLEET_KEY, DEMO_USERS, demo_seed
from routing_policies.models import ChangeRequest, PolicyVersion
from routing_policies.reviews.services import change_request_open
from routing_policies.services import (
    device_enroll,
    policy_draft_create,
    policy_draft_update_cells,
)
from telemetry.alerts.models import AlertRule

from .pages import LAPTOP, PHONE, ConsoleErrors, assert_no_sideways_scroll, log_in, log_out

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "artifacts" / "navigation"
MAX_CLICKS = 2
# The login form is the page of someone logged out; every role here is logged in.
NOT_FOR_LOGGED_IN = {"login"}


@dataclass(frozen=True)
class Route:
    """One route of the URLconf: its name (with namespace) and a URL with its parameters filled."""

    name: str
    url: str


@pytest.fixture
def demo(transactional_db: None, asgi_server: str) -> dict[str, Any]:
    """The demo as `make run` seeds it, and an open change request (so its page has an id):
    the values that fill the URLconf's parameters."""
    demo_seed()
    publisher = PolicyVersion.objects.get(fleet__slug=DEMO_FLEET, number=1).published_by
    fleet = PolicyVersion.objects.get(fleet__slug=DEMO_FLEET, number=1).fleet
    draft = policy_draft_create(actor=publisher, fleet=fleet)
    policy_draft_update_cells(
        actor=publisher,
        fleet=fleet,
        revision=draft.revision,
        edits=[
            {
                "task_type": "voice",
                "latency_budget": "interactive",
                "privacy_tier": "normal",
                "values": {"threshold": 0.55},
            }
        ],
    )
    change_request_open(
        actor=publisher, fleet=fleet, kind="publish", note="Lower θ for interactive voice"
    )
    rule = AlertRule.objects.filter(fleet=fleet).order_by("pk").first()
    assert rule is not None, "the demo seeds alert rules"
    device, _ = device_enroll(fleet_key=DEMO_FLEET_KEY, device_id="nav-phone-1")  # its page
    return {
        "device_id": device.device_id,
        "slug": DEMO_FLEET,
        "rule_id": rule.pk,
        "request_id": ChangeRequest.objects.get(fleet=fleet).pk,
    }


def _routes(seeded: dict[str, Any]) -> list[Route]:
    """Every named route of the URLconf outside /api/, parameters filled from `seeded`; the
    admin site counts as its index. A parameter nothing seeds gets "0": only an action (which
    answers 405 before it looks anything up) may have one, else the probe below fails."""
    found: list[Route] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if route.startswith("api/"):
                continue
            if isinstance(pattern, URLResolver):
                if pattern.namespace == "admin":
                    found.append(Route("admin:index", reverse("admin:index")))
                    continue
                inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
                walk(pattern.url_patterns, route, inner)
            elif isinstance(pattern, URLPattern) and pattern.name:
                params = re.findall(r"<(?:\w+:)?(\w+)>", route)
                kwargs = {name: seeded.get(name, "0") for name in params}
                name = f"{namespace}{pattern.name}"
                found.append(Route(name, reverse(name, kwargs=kwargs)))

    walk(get_resolver().url_patterns, "", "")
    return found


def _status(page: Page, base: str, url: str) -> tuple[int, str]:
    response = page.request.get(f"{base}{url}", max_redirects=0)
    return response.status, response.headers.get("content-type", "")


def _page_routes(page: Page, base: str, routes: list[Route]) -> dict[str, Route]:
    """The routes that are pages, by name: what the superuser's GET answers with HTML."""
    pages: dict[str, Route] = {}
    for route in routes:
        if route.name in NOT_FOR_LOGGED_IN:
            continue
        status, content_type = _status(page, base, route.url)
        if status == 405 or not content_type.startswith("text/html"):
            continue  # an action a form posts to, or no page (a probe, the Prometheus scrape)
        assert status == 200, f"{route.name} ({route.url}) answered {status} to the superuser"
        pages[route.name] = route
    return pages


def _view_name(base: str, href: str) -> str | None:
    """The route a link leads to, or None for a link off the site or to no route."""
    parts, origin = urlsplit(href), urlsplit(base)
    if parts.scheme not in ("http", "https") or parts.netloc != origin.netloc:
        return None
    try:
        return resolve(parts.path).view_name
    except Resolver404:
        return None


def _links(page: Page, visible_only: bool) -> list[str]:
    """The `href` of every link on the page (those a person can see and click, if asked)."""
    return page.eval_on_selector_all(
        "a[href]",
        """(links, visibleOnly) => links
             .filter(a => !visibleOnly || a.checkVisibility())
             .map(a => a.href)""",
        visible_only,
    )


def _current_page_marked(page: Page, what: str) -> None:
    """The fleet's navigation marks the page shown: one link with aria-current="page", drawn
    unlike its neighbours."""
    current = page.locator('.fleet-nav a[aria-current="page"]')
    expect(current).to_have_count(1)
    look = """el => { const s = getComputedStyle(el);
                      return [s.fontWeight, s.borderBottomColor, s.backgroundColor].join(' '); }"""
    other = page.locator(".fleet-nav a:not([aria-current])").first
    assert current.evaluate(look) != other.evaluate(look), (
        f"{what}: the current page looks unmarked"
    )


def _walk(page: Page, base: str, pages: dict[str, Route]) -> tuple[dict[str, list[str]], list[str]]:
    """Follow links from the fleet list: the clicks to each route from the fleet page (its
    path of route names) and every link the walk saw, visible or not."""
    console = ConsoleErrors(page)
    page.goto(f"{base}/")
    fleet_page = reverse("fleet-detail", args=[DEMO_FLEET])
    from_list = {_view_name(base, href) for href in _links(page, visible_only=True)}
    assert "fleet-detail" in from_list, "the fleet list links no fleet page"
    paths: dict[str, list[str]] = {"fleet-detail": []}
    seen_links: list[str] = []
    frontier = [("fleet-detail", fleet_page)]
    for clicks in range(1, MAX_CLICKS + 1):
        next_frontier: list[tuple[str, str]] = []
        for name, url in frontier:
            page.goto(f"{base}{url}", wait_until="domcontentloaded")
            # (The Django admin's own pages, unlike ours, name no icon: Chromium asks for one.)
            errors = [error for error in console.take() if "/favicon.ico" not in error]
            assert errors == [], f"console errors on {url}"
            if name in pages and page.locator(".fleet-nav").count():
                _current_page_marked(page, url)
            seen_links += [f"{url} -> {href}" for href in _links(page, visible_only=False)]
            for href in _links(page, visible_only=True):
                target = _view_name(base, href)
                if target is None or target in paths:
                    continue
                paths[target] = [*paths[name], target]
                if target in pages:
                    next_frontier.append((target, href.removeprefix(base)))
        frontier = next_frontier if clicks < MAX_CLICKS else []
    return paths, seen_links


@pytest.mark.parametrize("username", list(DEMO_USERS))
def test_navigation__each_role_from_the_fleet_list__every_page_it_may_open_within_two_clicks(
    asgi_server: str, demo: dict[str, Any], browser_page: Page, username: str
) -> None:
    page, base = browser_page, asgi_server
    page.set_viewport_size(LAPTOP)

    # Given the URLconf's pages, told apart from actions by the superuser's GET
    log_in(page, base, "admin", DEMO_USERS["admin"][1])
    pages = _page_routes(page, base, _routes(demo))
    assert {"fleet-detail", "fleet-alerts", "fleet-reviews", "fleet-schedules"} <= set(pages)
    assert {"fleet-backtests", "change-request", "admin:index"} <= set(pages)
    log_out(page)

    # And the pages this role may open
    log_in(page, base, username, DEMO_USERS[username][1])
    allowed = {name for name, route in pages.items() if _status(page, base, route.url)[0] == 200}
    refused = set(pages) - allowed
    for name in refused:
        status = _status(page, base, pages[name].url)[0]
        assert status in (302, 403), f"{username}: {name} answered {status}"

    # When they follow links from the fleet list, to the fleet page and on
    paths, seen_links = _walk(page, base, pages)

    print(f"\n{username}: {len(allowed)} pages; clicks from the fleet page: {paths}")
    # Then every page they may open is at most two clicks from the fleet page
    unreached = sorted(allowed - set(paths))
    assert unreached == [], f"{username} cannot reach {unreached} in {MAX_CLICKS} clicks"
    far = {name: path for name, path in paths.items() if name in allowed and len(path) > MAX_CLICKS}
    assert far == {}, f"{username}: more than {MAX_CLICKS} clicks: {far}"
    # And no page links a page they may not open
    forbidden = [link for link in seen_links if _view_name(base, link.split(" -> ")[1]) in refused]
    assert forbidden == [], f"{username} is shown links they may not follow: {forbidden}"
    # And the Django admin is linked for the superuser only, who is badged as such
    page.goto(f"{base}/")
    if username == "admin":
        expect(page.locator(".role-chip")).to_have_text("admin")
        assert "admin:index" in allowed
    else:
        expect(page.locator(".role-chip")).to_have_text(username)
        assert "admin:index" in refused


# The pages issue 22 changed (every fleet page has the fleet's navigation now); the forms
# shown as the publisher, who sees them all.
CHANGED = [
    ("fleet", "fleet-detail"),
    ("rollout", "fleet-rollout"),
    ("alerts", "fleet-alerts"),
    ("reviews", "fleet-reviews"),
    ("schedules", "fleet-schedules"),
    ("dashboard", "fleet-dashboard"),
    ("versions", "version-list"),
    ("diff", "version-diff"),
    ("audit", "fleet-audit"),
    ("devices", "device-list"),
    ("lab", "fleet-lab"),
    ("calibrate", "lab-calibrate"),
    ("backtests", "fleet-backtests"),
]


def test_changed_pages__at_1366_and_390_px__fit_the_window_and_are_kept_as_screenshots(
    asgi_server: str, demo: dict[str, Any], browser_page: Page
) -> None:
    page, base = browser_page, asgi_server
    folder = ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nnavigation screenshots: {folder}")
    log_in(page, base, "publisher", DEMO_USERS["publisher"][1])
    for size, width in ((LAPTOP, "1366"), (PHONE, "390")):
        page.set_viewport_size(size)
        for label, name in CHANGED:
            # Given the publisher on a changed page, at this width
            page.goto(f"{base}{reverse(name, args=[DEMO_FLEET])}")
            page.wait_for_load_state("load")
            if page.locator("#dashboard-config").count():  # its charts, drawn after load
                page.wait_for_function("() => window.dashboardLive?.renders > 0")
                expect(page.locator("#chart-shares .main-svg").first).to_be_attached()
            # Then it does not scroll sideways, and its navigation marks it
            assert_no_sideways_scroll(page, f"{label} at {width} px")
            _current_page_marked(page, f"{label} at {width} px")
            page.screenshot(path=str(folder / f"{width}-{label}.png"), full_page=True)


def test_schedule_and_review_forms__kind_chosen__only_its_fields_and_real_versions(
    asgi_server: str, demo: dict[str, Any], browser_page: Page
) -> None:
    page, base = browser_page, asgi_server
    log_in(page, base, "publisher", DEMO_USERS["publisher"][1])

    # Given the schedules page
    page.goto(f"{base}{reverse('fleet-schedules', args=[DEMO_FLEET])}")
    form = page.locator("#schedule-form")
    # When "Switch the fleet" is chosen
    form.get_by_label("What").select_option(label="Switch the fleet")
    # Then the version is chosen among the published ones, and the other kinds' fields hide
    version = form.locator('select[name="version"]')
    expect(version).to_be_visible()
    assert version.locator("option").all_inner_texts() == [
        "v1 · Initial policy from the design article"
    ]
    for hidden in ("note", "holdback", "to_stage", "theta_offset", "ttl_s"):
        expect(form.locator(f'[name="{hidden}"]')).to_be_hidden()
    # When a cloud-pressure window is chosen, its two fields show and the version hides
    form.get_by_label("What").select_option(label="Cloud-pressure window")
    expect(form.locator('[name="theta_offset"]')).to_be_visible()
    expect(form.locator('[name="ttl_s"]')).to_be_visible()
    expect(version).to_be_hidden()
    for size in (LAPTOP, PHONE):
        page.set_viewport_size(size)
        page.screenshot(path=str(ARTIFACTS / f"{size['width']}-schedules-cloud-pressure.png"))
    page.set_viewport_size(LAPTOP)

    # Given the change requests page / When a rollout is chosen / Then a version select shows
    page.goto(f"{base}{reverse('fleet-reviews', args=[DEMO_FLEET])}")
    ask = page.locator("form[data-kind-form]")
    expect(ask.locator('select[name="version"]')).to_be_hidden()
    ask.locator('select[name="kind"]').select_option(label="Start a rollout of a version")
    expect(ask.locator('select[name="version"]')).to_be_visible()
    log_out(page)
