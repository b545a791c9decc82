"""End-to-end fixtures: a real ASGI server and a real (Debian) Chromium driven by Playwright.

Chromium is never downloaded: the system's /usr/bin/chromium is used. Without it the tests are
skipped locally and fail under CI=true.
"""

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.integration.test_telemetry_durability import Worker
from tests.live_server import asgi_server, empty_test_redis

__all__ = ["asgi_server", "browser_page", "worker"]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PAGE_TIMEOUT_MS = 30_000
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def screenshot_path(name: str) -> Path:
    """`test-artifacts/<name>.png`, the directory created on demand."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"


@pytest.fixture
def worker() -> Iterator[Worker]:
    """A Celery worker (it runs the lab's backtests, among others); this test's Redis db
    emptied. A test that needs other settings (beat, intervals) defines its own."""
    empty_test_redis()
    with Worker({"TELEMETRY_RATE_LIMIT_BATCHES": "0"}) as started:
        yield started


@pytest.fixture(autouse=True)
def _fast_password_hasher() -> None:
    """Keep the real password hashers: users made here log in to the live server, which has them.

    (Overrides the suite-wide MD5 speed-up of tests/conftest.py for end-to-end tests.)
    """


@pytest.fixture
def browser_page(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh Chromium page (1440×900); a screenshot of it is saved when the test ends."""
    if not os.path.exists(CHROMIUM):
        message = f"{CHROMIUM} is missing; end-to-end tests need Debian's chromium package"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import expect, sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the test's own ORM calls (to
    # create data and check what was saved) are plain synchronous code all the same.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        # Outer bounds (a step goes on as soon as its page or element is there): on a loaded
        # 2-core machine a page load or a redraw can take longer than the 10 s this page had
        # and `expect`'s own default of 5 s.
        page.set_default_timeout(PAGE_TIMEOUT_MS)
        expect.set_options(timeout=PAGE_TIMEOUT_MS)
        try:
            yield page
        finally:
            try:
                page.screenshot(path=str(screenshot_path(request.node.name)), full_page=True)
            finally:
                context.close()
                browser.close()
                # ORM calls made while Playwright's loop lives get their own connection (asgiref
                # keys connections by context); close it, or the test database can't be dropped.
                connections.close_all()
