"""Every command README.md and docs/*.md show works as written after `make run`.

The commands are read from the documents themselves: each line of their ```sh blocks, and
each inline `.venv/bin/…` command of the prose. Each one is listed below either as a command
to run on the newcomer's machine (the embedded mode, a fresh copy of a var/ that `make run`
filled: tests/integration/embedded.py) or as an example for another environment, skipped with
its reason. A command in the documents that is in neither list fails the test, so a new one is
classified when it is written.

Run as written, with one substitution: a command addressing the server at 127.0.0.1:8000 is
pointed at the port of the `make run` the test started (port 8000 may be taken on a shared
machine); `make run` itself is given that port through PORT, the Makefile's own variable.
"""

import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .embedded import (
    REPO_ROOT,
    GroupProcess,
    MakeRun,
    copy_var,
    embedded_environment,
    run_on_machine,
)

pytestmark = pytest.mark.integration

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_BLOCK_RE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.S | re.M)
FENCED_RE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_COMMAND_RE = re.compile(r"`(\.venv/bin/[^`]+)`")
DOCUMENTED_PORT = "127.0.0.1:8000"


@dataclass(frozen=True)
class Run:
    """How a command is run: `once` to its end; `serves` (make run) until it answers, then
    Ctrl-C; `client` against a running `make run`, to its end; `client_until` against a running
    `make run` until it prints `until`, then Ctrl-C."""

    kind: str
    until: str = ""


RUN = {
    "make run": Run("serves"),
    "make run SIM_DEVICES=500 SIM_RATE=20": Run("serves"),
    ".venv/bin/python manage.py drf_create_token publisher": Run("once"),
    ".venv/bin/python manage.py rollout status --fleet voice-assistant-android": Run("once"),
    ".venv/bin/python manage.py telemetry_maintain": Run("once"),
    ".venv/bin/python manage.py seed_demo": Run("once"),
    "curl -s http://127.0.0.1:8000/healthz": Run("client"),
    (
        'curl -s -H "Authorization: Token $(.venv/bin/python manage.py drf_create_token publisher'
        " | awk '{print $3}')\" http://127.0.0.1:8000/api/v1/fleets/"
    ): Run("client"),
    (
        ".venv/bin/python -m edge_sdk.simulate --url http://127.0.0.1:8000 --fleet-key"
        " fk_demo_voice_assistant_android --devices 500 --rate 20"
    ): Run("client_until", until="] online "),
    (
        ".venv/bin/python manage.py simulate_fleet --url http://127.0.0.1:8000"
        " --scenario buggy-candidate"
    ): Run("client_until", until="] online "),
}

SKIPPED = {
    "make test": "the suite itself: this test is part of it",
    "make lint": "a development check CI runs as its own step (.ci/run), not a product command",
    "docker compose up": "the real-services stack in containers (another environment; CI "
    "validates the compose file in tests/unit/test_project_files.py)",
    ".venv/bin/python -m bench.guards": "a benchmark of about 30 minutes, not a product "
    "command (bench/README.md); its figures are kept in bench/RESULTS.md",
}


def _strip_comment(line: str) -> str:
    """`make run   # comment` -> `make run`; a # inside quotes stays."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line.rstrip()


def documented_commands() -> dict[str, list[str]]:
    """Each command of the documents, and where it is shown."""
    found: dict[str, list[str]] = {}
    for document in DOCUMENTS:
        text = document.read_text()
        name = str(document.relative_to(REPO_ROOT))
        for block in SHELL_BLOCK_RE.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                command = " ".join(_strip_comment(line).split())
                if command:
                    found.setdefault(command, []).append(name)
        for command in INLINE_COMMAND_RE.findall(FENCED_RE.sub("", text)):
            found.setdefault(" ".join(command.split()), []).append(name)
    return found


COMMANDS = documented_commands()


def test_documents__every_command__run_here_or_skipped_with_a_reason() -> None:
    # Given every command README.md and docs/ show
    # When each is looked up in this test's lists
    unclassified = {c: where for c, where in COMMANDS.items() if c not in RUN and c not in SKIPPED}
    stale = [c for c in [*RUN, *SKIPPED] if c not in COMMANDS]

    # Then each is either run below or skipped with its reason, and the lists hold no command
    # the documents no longer show
    assert unclassified == {}, "classify these in RUN or SKIPPED"
    assert stale == []


def _shell(command: str, var_dir: Path) -> subprocess.CompletedProcess[str]:
    return run_on_machine(["bash", "-c", command], var_dir)


@pytest.fixture(scope="module")
def server(
    embedded_var_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MakeRun]:
    """`make run` without its simulated fleet, for the commands typed in another terminal
    while it serves (they share its machine: its own copy of var/)."""
    var_dir = copy_var(embedded_var_template, tmp_path_factory.mktemp("served") / "var")
    with MakeRun(var_dir, "SIM=0") as run:
        yield run


@pytest.mark.parametrize(
    "command", sorted(c for c in COMMANDS if c in SKIPPED), ids=lambda command: command[:60]
)
def test_documented_command__other_environment__skipped_with_its_reason(command: str) -> None:
    pytest.skip(f"{command!r}: {SKIPPED[command]}")


@pytest.mark.parametrize(
    "command", sorted(c for c in COMMANDS if c in RUN), ids=lambda command: command[:60]
)
def test_documented_command__after_make_run__works_as_written(
    command: str, embedded_var: Path, request: pytest.FixtureRequest
) -> None:
    how = RUN[command]
    var_dir = embedded_var
    if how.kind == "once":
        # Given the machine after `make run` / When the command runs to its end
        result = _shell(command, var_dir)
        # Then it succeeds
        assert result.returncode == 0, result.stdout + result.stderr
        return
    if how.kind == "serves":
        # Given the machine after a first `make run` / When the command is typed again
        with MakeRun(var_dir, command=command) as run:
            # Then it serves the product (the demo's login page) until Ctrl-C, and stops cleanly
            with urllib.request.urlopen(f"{run.url}/login/", timeout=60) as login:
                assert login.status == 200, run.console()
            exit_code = run.stop()
        assert exit_code in (0, -signal.SIGINT), run.console()
        assert "make: ***" not in run.console()
        return
    # Given `make run` serving on the machine
    server: MakeRun = request.getfixturevalue("server")
    pointed = command.replace(DOCUMENTED_PORT, f"127.0.0.1:{server.port}")
    var_dir = server.var_dir
    if how.kind == "client":
        # When the command runs against it / Then it succeeds
        result = _shell(pointed, var_dir)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout, "it printed nothing"
        return
    # When the long-running command starts, and is stopped once it answers
    with GroupProcess(["bash", "-c", pointed], embedded_environment(var_dir)) as process:
        process.wait_for_output(how.until)
        exit_code = process.stop()
    # Then it talked to the server, and stopped cleanly on Ctrl-C
    assert exit_code == 0, process.console()
