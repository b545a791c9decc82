"""The embedded mode of a newcomer's machine after `make run`, in a temporary var/ directory.

`embedded_environment(var_dir)` is the environment of a shell on that machine: none of the
suite's service variables (DATABASE_URL, REDIS_URL, SECRET_KEY, DEBUG, HTTPS), the virtual
environment not activated, VAR_DIR pointing at a copy of a var/ that `make run` filled
(SQLite migrated and seeded, its secret key). `MakeRun` runs `make run` there as a person does,
in its own process group, and stops it as Ctrl-C does (SIGINT to every process of the group).
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import pytest

from tests.live_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
# Bounds, not expectations: a loaded 2-core machine may take this long; a hang fails the test.
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
# The suite's variables (scripts/test_env.sh, CI) and `make run`'s knobs: a newcomer has none.
SUITE_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "DEBUG",
    "HTTPS",
    "SQLITE_PATH",
    "LOG_LEVEL",
    "VAR_DIR",
    "DJANGO_SETTINGS_MODULE",
    "PORT",
    "HOST",
    "SIM",
    "SIM_DEVICES",
    "SIM_RATE",
    "RUN_LOG_LEVEL",
    "VIRTUAL_ENV",
    "PYTEST_ADDOPTS",
    "MAKEFLAGS",
    "MAKELEVEL",
    "MFLAGS",
)


def embedded_environment(var_dir: Path, **variables: str) -> dict[str, str]:
    """A shell's environment on the machine after `make run`, with var/ at `var_dir`."""
    env = {k: v for k, v in os.environ.items() if k not in SUITE_VARIABLES}
    venv = str(REPO_ROOT / ".venv")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(venv)
    )
    env.update({"VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1", **variables})
    return env


def run_on_machine(args: list[str], var_dir: Path) -> subprocess.CompletedProcess[str]:
    """A command typed on that machine, run to its end (bounded), its output captured."""
    return subprocess.run(
        args,
        cwd=REPO_ROOT,
        env=embedded_environment(var_dir),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )


def fill_var(var_dir: Path) -> None:
    """What `make run` leaves in var/: the database migrated and seeded, the secret key."""
    for command in (["migrate", "--noinput", "-v0"], ["seed_demo", "-v0"]):
        result = run_on_machine([".venv/bin/python", "manage.py", *command], var_dir)
        assert result.returncode == 0, result.stdout + result.stderr


def copy_var(template: Path, destination: Path) -> Path:
    """A fresh copy of a filled var/ (every command gets its own machine)."""
    shutil.copytree(template, destination)
    return destination


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


class GroupProcess:
    """A shell command in its own process group, its output kept; stopped as Ctrl-C stops it
    (SIGINT to every process of the group). Use as a context manager."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.args = command
        self.env = env
        self.returncode: int | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in __exit__)
            prefix="group-process-", suffix=".log", delete=False
        )
        self._process: subprocess.Popen[bytes] | None = None
        self._kept: str | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            self.args,
            cwd=REPO_ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> "GroupProcess":
        self.start()
        return self

    def wait_for_output(self, text: str) -> None:
        """Until the output shows `text` (e.g. the simulator's first progress line)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while text not in self.console():
            if not self.running() or time.monotonic() > deadline:
                pytest.fail(f"{self.args} never printed {text!r}:\n{self.console()}")
            time.sleep(0.2)

    def stop(self) -> int:
        """Ctrl-C: SIGINT to every process of the group; the exit code."""
        assert self._process is not None
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGINT)
            try:
                self._process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(timeout=10)
                pytest.fail(f"{self.args} did not stop on Ctrl-C:\n{self.console()}")
        self.returncode = self._process.returncode
        return self.returncode

    def console(self) -> str:
        if self._kept is not None:
            return self._kept
        return Path(self._log.name).read_text(errors="replace")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self.running():
                self.stop()
        finally:
            # Anything of the group still alive (a failed test) goes with it.
            if self._process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGKILL)
            self._kept = self.console()  # still readable after the block
            self._log.close()
            os.unlink(self._log.name)


class MakeRun(GroupProcess):
    """`make run [args]` (or a shell line that is one) in `var_dir`, on a free port.

    `with MakeRun(var_dir, "SIM=0") as run:` waits for /healthz; `run.stop()` (or leaving the
    block) is Ctrl-C; `run.console()` is everything make and its processes printed.
    """

    def __init__(
        self, var_dir: Path, *make_args: str, command: str | None = None, **variables: str
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.var_dir = var_dir
        super().__init__(
            ["bash", "-c", command] if command else ["make", "run", *make_args],
            embedded_environment(var_dir, PORT=str(self.port), **variables),
        )

    def __enter__(self) -> "MakeRun":
        self.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(self.url):
            if not self.running():
                pytest.fail(f"`make run` ended ({self.returncode}):\n{self.console()}")
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"`make run` did not answer /healthz:\n{self.console()}")
            time.sleep(0.2)
        return self
