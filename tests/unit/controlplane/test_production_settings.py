"""Production settings as docs/operations.md documents them, and the embedded mode's key.

Each test starts a fresh Python process with an environment built from scratch (never the
suite's own, which is HTTPS=0 plain http): settings are read once, at startup, from it.
"""

import json
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OPERATIONS = ROOT / "docs" / "operations.md"
TIMEOUT_S = 180


def documented_production_environment() -> dict[str, str]:
    """The `env` block under "Production settings" in docs/operations.md, with a real key in
    place of the placeholder a reader fills in."""
    text = OPERATIONS.read_text()
    section = text[text.index("## Production settings") :]
    block = re.search(r"^```env\n(.*?)^```", section, re.S | re.M)
    assert block, "docs/operations.md lost its production `env` block"
    variables = dict(
        line.split("=", 1) for line in block.group(1).splitlines() if line and "=" in line
    )
    assert variables["SECRET_KEY"].startswith("<"), "the block's key is a placeholder"
    variables["SECRET_KEY"] = secrets.token_urlsafe(50)
    return variables


def _bare_environment(**variables: str) -> dict[str, str]:
    """Only what a process needs to start, plus `variables`."""
    base = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    return {**base, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **variables}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_check_deploy__documented_production_settings__no_issue() -> None:
    # Given the environment docs/operations.md documents for a deployment (DEBUG left unset)
    env = _bare_environment(**documented_production_environment())

    # When Django's deployment checklist runs, failing on any warning
    result = _run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env
    )

    # Then it finds nothing: HSTS, https redirect, Secure cookies, key, DEBUG, hosts, schema
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


_BEHIND_THE_BALANCER = """
import json, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="control.example.com")
plain = client.get("/login/")
tls = client.get("/login/", headers={"X-Forwarded-Proto": "https"})
health = client.get("/healthz")
print(json.dumps({
    "plain": [plain.status_code, plain.get("Location")],
    "tls": [tls.status_code, tls.get("Strict-Transport-Security"),
            "secure" if tls.cookies["csrftoken"]["secure"] else "not secure"],
    "health": health.status_code,
}))
"""


def test_production_settings__behind_the_tls_balancer__https_only_health_check_open() -> None:
    # Given a process with the documented production environment, behind a balancer that
    # sets X-Forwarded-Proto on what reached it over TLS
    env = _bare_environment(**documented_production_environment())

    # When the login page is asked for over plain http, then over TLS, and the health check
    result = _run([sys.executable, "-c", _BEHIND_THE_BALANCER], env)
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout.strip().splitlines()[-1])

    # Then plain http is sent to https; over TLS the page comes with HSTS and a Secure cookie;
    # the balancer's health check is answered over http (no redirect loop)
    assert answers["plain"] == [301, "https://control.example.com/login/"]
    assert answers["tls"] == [200, "max-age=31536000; includeSubDomains; preload", "secure"]
    assert answers["health"] == 200


def test_production_settings__no_secret_key__refuses_to_start_naming_it() -> None:
    # Given the production environment without SECRET_KEY
    variables = documented_production_environment()
    del variables["SECRET_KEY"]

    # When any command starts
    result = _run([sys.executable, "manage.py", "check"], _bare_environment(**variables))

    # Then it refuses, saying what to set (never a generated key a second process lacks)
    assert result.returncode != 0
    assert "Set the SECRET_KEY environment variable" in result.stderr


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param({}, id="embedded"),
        pytest.param(
            {
                "DATABASE_URL": "postgres://root@127.0.0.1:5432/unused",
                "REDIS_URL": "redis://127.0.0.1:6379/15",
                "HTTPS": "0",
            },
            id="make-run-with-real-services",
        ),
    ],
)
def test_this_machine__no_secret_key__one_key_generated_and_kept_in_var(
    tmp_path: Path, mode: dict[str, str]
) -> None:
    # Given plain http on this machine (the embedded mode, or `make run` with real services:
    # HTTPS=0), no SECRET_KEY, an empty var/
    var_dir = tmp_path / "var"
    env = _bare_environment(VAR_DIR=str(var_dir), **mode)
    show = (
        "import django; django.setup(); from django.conf import settings as s; print(s.SECRET_KEY)"
    )

    # When two processes start one after the other
    first = _run([sys.executable, "-c", show], env)
    second = _run([sys.executable, "-c", show], env)

    # Then the first wrote a strong key to var/secret_key, readable by its owner only, and
    # both used it (sessions and signed values survive a restart of `make run`)
    assert first.returncode == 0, first.stderr
    key_file = var_dir / "secret_key"
    key = key_file.read_text().strip()
    assert len(key) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first.stdout.strip() == key
    assert second.stdout.strip() == key


def test_settings__unknown_api_docs_access__refuses_to_start_naming_it() -> None:
    # Given a deployment that misspells who may read the API docs
    env = _bare_environment(**documented_production_environment(), API_DOCS_ACCESS="everyone")

    # When a command starts
    result = _run([sys.executable, "manage.py", "check"], env)

    # Then it refuses and names the variable and its choices, rather than guessing
    assert result.returncode != 0
    assert "API_DOCS_ACCESS='everyone'" in result.stderr
    assert "authenticated" in result.stderr


def test_settings__variables_named_like_settings__override_them_as_their_type() -> None:
    # Given a process whose environment sets a few of the documented variables, one of each
    # type, and leaves the rest unset
    env = _bare_environment(
        TELEMETRY_DRAINS="5",
        MQTT_RECONCILE_S="7.5",
        ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS="true",
        MQTT_TOPIC_PREFIX="acme/routing",
    )
    show = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(repr((s.TELEMETRY_DRAINS, s.MQTT_RECONCILE_S, "
        "s.ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS, s.MQTT_TOPIC_PREFIX, s.PUSH_RECONCILE_S)))"
    )

    # When the settings are read
    result = _run([sys.executable, "-c", show], env)

    # Then each set variable overrides its setting, read as the setting's type, and an unset
    # one keeps its documented default
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(5, 7.5, True, 'acme/routing', 60.0)"


def test_settings__unknown_mqtt_access__refuses_to_start_naming_it() -> None:
    # Given a deployment that misspells how devices' broker access is managed
    env = _bare_environment(MQTT_ACCESS="acl-file")

    # When a command starts
    result = _run([sys.executable, "manage.py", "check"], env)

    # Then it refuses and names the variable and its choices
    assert result.returncode != 0
    assert "MQTT_ACCESS='acl-file'" in result.stderr
    assert "dynsec" in result.stderr
