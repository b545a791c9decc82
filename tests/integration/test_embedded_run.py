"""`make run` as a newcomer sees it: the product's own pages, static files, a quiet console."""

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .embedded import REPO_ROOT, MakeRun, run_on_machine

pytestmark = pytest.mark.integration

# What a quiet console may show: the banner, and the simulator's start, progress and end.
BANNER_RE = re.compile(
    r"^  (Edge routing control plane|Logins|Live dashboard of the simulated fleet|API docs): "
)
SIMULATOR_RE = re.compile(r"^(simulating \d+ devices|\[ *\d+s\] online|stopping: |done: )")


@pytest.fixture
def quiet_run(embedded_var: Path) -> Iterator[MakeRun]:
    with MakeRun(embedded_var, "SIM_DEVICES=3", "SIM_RATE=1") as run:
        yield run


def _api_token(var_dir: Path, user: str) -> str:
    result = run_on_machine([".venv/bin/python", "manage.py", "drf_create_token", user], var_dir)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[2]  # "Generated token <key> for user <user>"


def _log_in(http: httpx.Client, username: str, password: str) -> str:
    """Log in through the form as a browser does; the CSRF token for later posts."""
    page = http.get("/login/").text
    form_token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert form_token
    answer = http.post(
        "/login/",
        data={
            "csrfmiddlewaretoken": form_token.group(1),
            "username": username,
            "password": password,
        },
    )
    assert answer.status_code == 302, answer.text
    return str(http.cookies["csrftoken"])


def test_make_run__unknown_address__product_404_page_and_static_files_served(
    embedded_var: Path,
) -> None:
    # Given `make run` on the newcomer's machine (no simulated fleet, to keep it light)
    with MakeRun(embedded_var, "SIM=0") as run, httpx.Client(base_url=run.url) as http:
        # When a browser opens an address nothing serves, and the page's stylesheet
        missing = http.get("/fleets/voice-assistant-android/no-such-page/")
        stylesheet = http.get("/static/css/app.css")
        plotly = http.get("/static/vendor/plotly.min.js")

    # Then the 404 is the product's page (not Django's list of every URL pattern) ...
    assert missing.status_code == 404
    assert "<h1>Not found</h1>" in missing.text
    assert "Back to the fleets" in missing.text
    assert "URLconf" not in missing.text
    assert "api/v1/" not in missing.text
    # ... and static files are served, whole, by the same process
    assert stylesheet.status_code == 200
    assert stylesheet.headers["Content-Type"].startswith("text/css")
    assert stylesheet.content == (REPO_ROOT / "static" / "css" / "app.css").read_bytes()
    assert plotly.status_code == 200
    assert plotly.content == (REPO_ROOT / "static" / "vendor" / "plotly.min.js").read_bytes()


def test_make_run__403_404_schema_then_ctrl_c__quiet_console_and_exit_0(
    quiet_run: MakeRun, embedded_var: Path
) -> None:
    # Given `make run` with a small simulated fleet that has started
    quiet_run.wait_for_output("simulating 3 devices")
    token = _api_token(embedded_var, "viewer")

    # When a viewer is refused by the API and by a page, a page is missing, the schema and a
    # static file are loaded, and then Ctrl-C is pressed
    with httpx.Client(base_url=quiet_run.url) as http:
        refused_api = http.post(
            "/api/v1/fleets/",
            json={"slug": "x", "name": "x"},
            headers={"Authorization": f"Token {token}"},
        )
        csrf = _log_in(http, "viewer", "demo-viewer")
        refused_page = http.post(
            "/fleets/voice-assistant-android/draft/start/", data={"csrfmiddlewaretoken": csrf}
        )
        missing = http.get("/no/such/page/")
        schema = http.get("/api/schema/", headers={"Authorization": f"Token {token}"})
        static = http.get("/static/js/app.js")
    assert [refused_api.status_code, refused_page.status_code, missing.status_code] == [
        403,
        403,
        404,
    ]
    assert [schema.status_code, static.status_code] == [200, 200]
    exit_code = quiet_run.stop()

    # Then the recipe ended cleanly (no "make: *** … Error 143"): make ends as any program
    # Ctrl-C stops, by the signal (it re-raises SIGINT once its recipe is done; a failed
    # recipe would be exit code 2). The console holds the banner and the simulator's lines
    # only: no traceback, no warning, no line printed twice.
    console = quiet_run.console()
    assert exit_code in (0, -signal.SIGINT), console
    assert "make: ***" not in console
    lines = [line for line in console.splitlines() if line.strip()]
    others = [line for line in lines if not (BANNER_RE.match(line) or SIMULATOR_RE.match(line))]
    assert others == [], console
    assert console.count("demo-viewer") == 1, console
    assert console.count("Edge routing control plane: ") == 1, console
    assert "done: " in console
