"""The repository's contracts: migrations in step, compose file valid, protocol doc in step."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_migrations__models_as_committed__no_missing_migration() -> None:
    # Given the models as committed
    # When makemigrations checks for changes
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DEBUG": "1"},
        check=False,
    )
    # Then no model change lacks its migration
    assert result.returncode == 0, result.stdout + result.stderr


def _compose_command() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose__config__valid_with_every_service() -> None:
    # Given the compose file and a compose client (CI installs one)
    command = _compose_command()
    if command is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no docker compose client on CI")
        pytest.skip("no docker compose client")
    # When compose parses it
    result = subprocess.run(
        [*command, "-f", "docker-compose.yml", "config", "--services"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    # Then it is valid and describes the whole stack
    assert result.returncode == 0, result.stderr
    services = set(result.stdout.split())
    assert {
        "postgres",
        "redis",
        "web",
        "worker",
        "beat",
        "fleet",
        "mosquitto",
        "mqtt_link",
    } <= services


def test_protocol_doc__shared_contract__project_copy_keeps_every_line() -> None:
    # Given the shared protocol (beside the checkout) and the project's copy
    shared = ROOT.parent / "shared" / "PROTOCOL.md"
    if not shared.exists():
        pytest.skip("no shared/ beside this checkout")
    ours = (ROOT / "docs" / "PROTOCOL.md").read_text()
    # Then the project's copy may extend the protocol but never drops or changes a line of it
    missing = [
        line for line in shared.read_text().splitlines() if line.strip() and line not in ours
    ]
    assert missing == []
