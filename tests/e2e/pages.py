"""What a person sees on a page, measured in the browser: sideways overflow, overlapping labels,
console errors. Shared by the layout tests and the first-hour walk."""

from typing import Any

from playwright.sync_api import Page, expect

from tests.factories import PASSWORD

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 800}


def log_in(page: Page, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Log in through the login form; the top bar then names the user."""
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".who-name")).to_have_text(username)


def log_out(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("button", name="Log in")).to_be_visible()


def overflow(page: Page) -> dict[str, Any]:
    """How far the page reaches past the viewport sideways, and which elements do it.

    The page scrolls sideways when the document is wider than the window; the culprits named
    are the outermost visible elements whose right edge passes the window's (boxes that
    scroll inside themselves do not count: their content does not move the page).
    """
    return page.evaluate(
        """() => {
          const width = window.innerWidth;
          const culprits = [];
          for (const el of document.querySelectorAll('body *')) {
            const box = el.getBoundingClientRect();
            if (box.width === 0 || box.right <= width + 0.5) { continue; }
            let parent = el.parentElement, clipped = false;
            while (parent && parent !== document.body) {
              const style = getComputedStyle(parent);
              if (style.overflowX !== 'visible') { clipped = true; break; }
              parent = parent.parentElement;
            }
            if (!clipped && culprits.length < 5) {
              const classes = String(el.className || '').split(' ').filter(Boolean);
              const name = [el.tagName.toLowerCase(), ...classes].join('.');
              culprits.push(name + ' right=' + Math.round(box.right));
            }
          }
          return { scrollWidth: document.documentElement.scrollWidth, innerWidth: width, culprits };
        }"""
    )


def assert_no_sideways_scroll(page: Page, what: str) -> None:
    """The page is no wider than the window (document.documentElement.scrollWidth)."""
    measured = overflow(page)
    assert measured["scrollWidth"] <= measured["innerWidth"], (
        f"{what}: the page scrolls sideways ({measured['scrollWidth']} px in a "
        f"{measured['innerWidth']} px window); widest: {measured['culprits']}"
    )


def assert_in_view_horizontally(page: Page, selector: str, what: str) -> None:
    """Each matching visible element lies within the window's width (not cut off at a side)."""
    boxes = page.evaluate(
        """sel => [...document.querySelectorAll(sel)]
             .map(el => el.getBoundingClientRect())
             .filter(b => b.width > 0)
             .map(b => [b.left, b.right])""",
        selector,
    )
    width = page.evaluate("() => window.innerWidth")
    assert boxes, f"{what}: nothing matches {selector}"
    for left, right in boxes:
        assert left >= -0.5, f"{what}: {selector} cut off on the left at {left}"
        assert right <= width + 0.5, f"{what}: {selector} cut off on the right at {right}"


def wider_than_the_window(page: Page) -> list[str]:
    """Visible elements wider than the window (they cannot be read without scrolling sideways,
    whether the page or a box inside it scrolls)."""
    return page.evaluate(  # type: ignore[no-any-return]
        """() => {
          const width = window.innerWidth;
          return [...document.querySelectorAll('body *')]
            // A chart's own drawing layers may reach past its box (they are clipped to it).
            .filter(el => !(el instanceof SVGElement) || el.tagName.toLowerCase() === 'svg')
            .filter(el => el.getBoundingClientRect().width > width + 0.5)
            // Plotly's text-measuring box sits far off the page, where nobody sees it.
            .filter(el => el.getBoundingClientRect().right > 0)
            .filter(el => getComputedStyle(el).visibility !== 'hidden')
            .slice(0, 5)
            .map(el => {
              const name = [el.tagName.toLowerCase(), ...String(el.className || '').split(' ')];
              const width = Math.round(el.getBoundingClientRect().width);
              return name.filter(Boolean).join('.') + ' width=' + width;
            });
        }"""
    )


def off_screen(page: Page, selector: str) -> dict[str, Any]:
    """How many visible elements match, and those not wholly inside the window's width or
    inside a box that scrolls sideways (a box whose content is wider than the box)."""
    return page.evaluate(  # type: ignore[no-any-return]
        """sel => {
          const width = window.innerWidth;
          const shown = [...document.querySelectorAll(sel)]
            .filter(el => el.getBoundingClientRect().width > 0);
          const off = [];
          for (const el of shown) {
            const box = el.getBoundingClientRect();
            let why = null;
            if (box.left < -0.5 || box.right > width + 0.5) {
              why = `left=${Math.round(box.left)} right=${Math.round(box.right)}`;
            }
            for (let up = el.parentElement; up && !why; up = up.parentElement) {
              const overflow = getComputedStyle(up).overflowX;
              if (overflow !== 'visible' && up.scrollWidth > up.clientWidth + 1) {
                const box = `${up.tagName.toLowerCase()}.${up.className}`;
                why = `in a box that scrolls sideways (${box})`;
              }
            }
            if (why) {
              const name =
                el.dataset.cell || el.dataset.label || el.textContent.trim().slice(0, 30);
              off.push(`${name}: ${why}`);
            }
          }
          return { shown: shown.length, off };
        }""",
        selector,
    )


def assert_on_screen(page: Page, selector: str, what: str) -> int:
    """Every visible element matching `selector` (at least one) is wholly on screen sideways,
    not in a box that scrolls; returns how many there are."""
    measured = off_screen(page, selector)
    assert measured["shown"], f"{what}: nothing visible matches {selector}"
    assert measured["off"] == [], f"{what}: {selector} not on screen: {measured['off']}"
    return int(measured["shown"])


def text_boxes(page: Page, selector: str) -> list[dict[str, Any]]:
    """The text and bounding box of each visible element matching `selector`."""
    return page.evaluate(  # type: ignore[no-any-return]
        """sel => [...document.querySelectorAll(sel)]
             .map(el => ({ text: el.textContent, box: el.getBoundingClientRect().toJSON() }))
             .filter(t => t.box.width > 0 && t.text.trim() !== '')""",
        selector,
    )


def overlapping(boxes: list[dict[str, Any]], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of labels whose boxes overlap (by more than `slack` px each way)."""
    pairs = []
    for i, first in enumerate(boxes):
        for second in boxes[i + 1 :]:
            a, b = first["box"], second["box"]
            if (
                min(a["right"], b["right"]) - max(a["left"], b["left"]) > slack
                and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > slack
            ):
                pairs.append((first["text"], second["text"]))
    return pairs


def assert_dashboard_reads(page: Page, what: str) -> None:
    """The drawn dashboard reads at a glance: the version and stage labels stand apart and
    inside the plot, the budget labels stand apart, the policy grids' axis labels and figures
    stand apart at a readable size, and the bucket in progress is out of every line, shaded."""
    markers = text_boxes(page, "#chart-shares .annotation-text-g text")
    assert overlapping(markers) == [], f"{what}: rollout labels overlap: {overlapping(markers)}"
    plot = page.locator("#chart-shares .nsewdrag").first.bounding_box()
    assert plot is not None
    for marker in markers:
        box = marker["box"]
        assert box["left"] >= plot["x"] - 1, f"{what}: {marker['text']!r} cut at the left"
        assert box["right"] <= plot["x"] + plot["width"] + 1, f"{what}: {marker['text']!r} cut"
    budgets = text_boxes(page, "#chart-latency .annotation-text-g text")
    assert overlapping(budgets) == [], f"{what}: budget labels overlap: {overlapping(budgets)}"
    for grid in ("chart-grid-cloud", "chart-grid-p95"):
        for axis in ("xtick", "ytick"):
            ticks = text_boxes(page, f"#{grid} .{axis} text")
            assert ticks, f"{what}: {grid} has no {axis} labels"
            assert overlapping(ticks) == [], f"{what}: {grid} {axis} labels run together"
        figures = text_boxes(page, f"#{grid} .hm text")
        assert figures, f"{what}: {grid} shows no figures"
        assert overlapping(figures) == [], f"{what}: {grid} figures run together"
        sizes = page.evaluate(
            "sel => [...document.querySelectorAll(sel)]"
            ".map(t => parseFloat(getComputedStyle(t).fontSize))",
            f"#{grid} .hm text",
        )
        assert min(sizes) >= 11, f"{what}: {grid} figures at {min(sizes)} px"
        assert_in_view_horizontally(page, f"#{grid} .main-svg", what)
    drawn = page.evaluate(
        """() => {
          const payload = window.dashboardLive.payload;
          const last = payload.window.partial_bucket;
          const lines = ['chart-shares', 'chart-latency', 'chart-rates', 'chart-privacy']
            .flatMap(id => document.getElementById(id).data
              .filter(t => t.x && t.x.length === payload.buckets.length)
              .map(t => [id + ' ' + t.name, t.y[last]]));
          const bands = document.getElementById('chart-shares').layout.shapes
            .filter(s => s.name === 'partial').map(s => s.x0);
          const whole = payload.series.events.some((n, i) => i !== last && n > 0);
          return { last, buckets: payload.buckets.length, lines, bands, whole,
                   from: payload.window.partial_from };
        }"""
    )
    assert drawn["last"] == drawn["buckets"] - 1, what
    assert drawn["lines"], what
    # (Unless no whole bucket has events yet: then the bucket in progress, shaded, is all
    # there is to show, rather than empty charts.)
    if drawn["whole"]:
        assert [name for name, value in drawn["lines"] if value is not None] == [], (
            f"{what}: the bucket in progress is drawn"
        )
    assert drawn["bands"] == [drawn["from"]], f"{what}: the bucket in progress is not shaded"


class ConsoleErrors:
    """Every console error and uncaught page error of a page, from when it is attached."""

    def __init__(self, page: Page) -> None:
        self.messages: list[str] = []
        page.on(
            "console",
            lambda message: (
                self.messages.append(f"{message.text} ({message.location})")
                if message.type == "error"
                else None
            ),
        )
        page.on("pageerror", lambda error: self.messages.append(f"uncaught: {error}"))

    def take(self) -> list[str]:
        """The errors since the last call."""
        taken, self.messages[:] = list(self.messages), []
        return taken
