"""Schemathesis, every check, against the real ASGI server over PostgreSQL and Redis.

The schema is generated in-process (so the test does not depend on who may read /api/schema/)
and handed to `st run`, which calls every operation with generated requests, valid and invalid,
as an operator (a publisher's DRF token) and as an enrolled device (its bearer token), and
checks each answer: no server error, a status and a body the schema declares, invalid input
refused, valid input accepted, undeclared methods 405, auth never ignored.

Read operations run against a seeded fleet (a published version, a draft, an alert rule, a
webhook, a device), so their real bodies are checked against the schema; writes run against
generated slugs and against what schemathesis learns from the answers (its stateful phase
creates fleets, drafts and rules and works on them). The hooks (schemathesis_hooks.py) keep the
run's own device from being revoked and give positive telemetry events its context.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.authtoken.models import Token

from routing_policies.segments.services import segment_create
from routing_policies.services import device_enroll, policy_draft_create
from telemetry.alerts.services import alert_rule_create, alert_webhook_create
from tests.live_server import REPO_ROOT, asgi_server, require_postgres_and_redis

__all__ = ["asgi_server"]

pytestmark = pytest.mark.integration

# Bounds that keep the run to a few minutes on a busy 2-core machine (CI stays under 20).
MAX_EXAMPLES = 12
MAX_TIME_S = 240
REQUEST_TIMEOUT_S = 20
SEED = int(os.environ.get("SCHEMATHESIS_SEED", "11"))  # another seed explores elsewhere
STATE_DEPENDENT = json.dumps(
    [
        "alert_rule_create",
        "alert_rule_update",
        "alert_webhook_create",
        "v1_fleets_draft_create",
        "v1_fleets_draft_dimensions_destroy",
        "v1_fleets_draft_cells_partial_update",
        "v1_fleets_draft_document_update",
        "v1_fleets_draft_dimensions_create",
        "telemetry_ingest",
        "lab_calibration_compute",
        "lab_calibration_apply",
        "segment_create",
        "segment_update",
        "segment_preview",
        "v1_fleets_draft_overrides_update",
        "backtest_start",
        "autopilot_set",
    ]
)
NEGATIVE_REFUSED = [
    "400",
    "401",
    "403",
    "404",
    "405",
    "406",
    "409",
    "413",
    "415",
    "422",
    "428",
    "429",
]
POSITIVE_OR_STATE_400 = ["2xx", "3xx", "400", "401", "403", "404", "409", "413", "429"]


def _config(*, operator_token: str, device_token: str, slug: str) -> str:
    """schemathesis.toml: credentials per security scheme, bounds, reads on the seeded fleet."""
    return f"""
[generation]
max-examples = {MAX_EXAMPLES}
# Strings the schema allows carry no NUL (the server refuses one in any field or parameter
# with a 400, tested on its own in tests/unit/controlplane/test_api_contract.py).
allow-x00 = false

[checks]
enabled = true

# A body over the limit (1,001 events, a document over 1 MiB) is refused with 413 Content Too
# Large, the status for it, rather than 400.
[checks.negative_data_rejection]
expected-statuses = {json.dumps(NEGATIVE_REFUSED)}

[auth]
auto-signup = false

[auth.openapi.tokenAuth]
api_key = "Token {operator_token}"

[auth.openapi.deviceToken]
bearer = "{device_token}"

[[operations]]
include-method = "GET"
parameters = {{ "path.slug" = "{slug}" }}

# Valid by the schema but refused (400) by the current state, which no schema can say: a webhook
# for a rule that does not exist, a cell scope naming no cell of the fleet, a cell edit or an
# import whose weights do not sum to 1 or whose table misses cells, a dimension value copied
# from one that is not there or a value removed that is not there, a draft copied from a
# version that was never published, a calibration (or its apply) naming a cell the table lacks
# (`cells[0]`, as every other list in the API). A document of the schema's 4,096 cells can
# also be over the 1 MiB body limit (413). A telemetry event must also be of a published
# version and its cells: the hooks give positive events this device's context, and what they
# leave generated may not. A segment rule's schema says its shape, not every bound of it (a
# range whose ends cross, a version listed twice as `14` and `14.0`, its depth and size), and
# an edit names the revision it read (409 when another edit came first). An override names a
# segment of the fleet and cells of its table, and must leave each cell valid whole; a backtest
# names a version the fleet published and a segment it has, and so does an autopilot
# objective's `segment`.
[[operations]]
include-operation-id = {STATE_DEPENDENT}
checks.positive_data_acceptance.expected-statuses = {json.dumps(POSITIVE_OR_STATE_400)}
"""


@pytest.fixture
def seeded(transactional_db: None, fleet: Any, fleet_key: str, publisher: Any) -> dict[str, str]:
    """The fleet with a draft, an alert rule, a webhook and an enrolled device; the tokens."""
    policy_draft_create(actor=publisher, fleet=fleet)
    rule = alert_rule_create(
        actor=publisher,
        fleet=fleet,
        name="Cloud share high",
        metric="cloud_share",
        condition="above",
        threshold=0.5,
    )
    alert_webhook_create(
        actor=publisher, fleet=fleet, url="https://hooks.example.com/alerts", rule_id=rule.pk
    )
    _, device_token = device_enroll(fleet_key=fleet_key, device_id="phone-1", platform="android")
    segment_create(
        actor=publisher,
        fleet=fleet,
        name="npu",
        description="",
        rule={"attribute": "accelerator", "equals": "npu"},
    )
    operator_token = Token.objects.create(user=publisher).key
    return {"operator": operator_token, "device": device_token, "slug": fleet.slug}


def test_schemathesis__every_operation_every_check__no_failure(
    asgi_server: str, seeded: dict[str, str], tmp_path: Path
) -> None:
    # Given the live server on PostgreSQL and Redis, its schema, and the two kinds of credentials
    require_postgres_and_redis("the schemathesis run")
    schema = SchemaGenerator().get_schema(request=None, public=True)
    schema_path = tmp_path / "openapi.json"
    schema_path.write_text(json.dumps(schema, default=str))
    (tmp_path / "schemathesis.toml").write_text(
        _config(
            operator_token=seeded["operator"], device_token=seeded["device"], slug=seeded["slug"]
        )
    )

    # When schemathesis runs every phase and every check over every operation
    command = [
        str(Path(sys.executable).parent / "st"),
        "--no-color",
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        str(schema_path),
        "--url",
        asgi_server,
        "--checks",
        "all",
        "--max-time",
        str(MAX_TIME_S),
        "--request-timeout",
        str(REQUEST_TIMEOUT_S),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    environment = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.integration.schemathesis_hooks",
        "SCHEMATHESIS_DEVICE_ID": "phone-1",
        "SCHEMATHESIS_POLICY_VERSION": "1",
        "SCHEMATHESIS_CELL": "voice/interactive/normal",
        "SCHEMATHESIS_SEGMENT": "npu",
        "PYTHONPATH": str(REPO_ROOT),
    }
    result = subprocess.run(  # our own interpreter's entry point
        command,
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=MAX_TIME_S + 240,
    )

    # Then no check failed on any operation
    output = result.stdout + result.stderr
    Path(os.environ.get("SCHEMATHESIS_LOG", tmp_path / "schemathesis.log")).write_text(output)
    assert result.returncode == 0, output[-20000:]
