"""The API contract: query parameters typed, bounded and refused with a 400 naming them; the
OpenAPI schema describes every answer with a component, every error status with the error
body, and the device token as a security scheme."""

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

DEVICES = "/api/v1/fleets/fleet-a/devices/"
METRICS = "/api/v1/metrics/fleets/fleet-a/"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def _refused_fields(response: Any) -> list[str]:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"]["code"] == "validation_failed"
    return [detail["field"] for detail in body["error"]["details"]]


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        (DEVICES, "online=-3196840896266", "online"),
        (DEVICES, "online=", "online"),
        (DEVICES, "limit=0", "limit"),
        (DEVICES, "limit=", "limit"),
        (DEVICES, "offset=%2B5", "offset"),
        (DEVICES, "offset=79615802690047815318266395492352", "offset"),
        (DEVICES, "limit=-1", "limit"),
        (DEVICES, "version=2147483648", "version"),
        (DEVICES, "platform=%00", "platform"),
        (METRICS, "scores=null", "scores"),
        (METRICS, "cohort=", "cohort"),
        (METRICS, "task_type=%00", "task_type"),
        (METRICS, "window=401d", "window"),
        (METRICS, "window=1h%20", "window"),
        (METRICS, "group_by=cell,weather", "group_by"),
        ("/api/v1/fleets/fleet-a/diff/", "a=1&b=one", "b"),
        ("/api/v1/fleets/fleet-a/diff/", "b=1", "a"),
        ("/api/v1/fleets/fleet-a/audit/", "limit=-1", "limit"),
        ("/api/v1/audit/", "fleet=%00", "fleet"),
        ("/api/v1/fleets/fleet-a/alerts/history/", "limit=1001", "limit"),
        ("/api/v1/fleets/fleet-a/alerts/deliveries/", "limit=abc", "limit"),
        ("/api/v1/fleets/fleet-a/versions/1/document", "download=maybe", "download"),
        ("/api/v1/fleets/fleet-a/", "anything=%00", "anything"),
    ],
)
def test_query_parameter__out_of_type_or_range__400_naming_it(
    fleet: Any, viewer: Any, client_as: Any, path: str, query: str, field: str
) -> None:
    # Given a viewer of an existing fleet
    client = client_as(viewer)

    # When a query parameter is outside what the schema declares
    response = client.get(f"{path}?{query}")

    # Then the request is refused with a 400 naming that parameter
    assert field in _refused_fields(response)


def test_path_parameter__nul_in_device_id__400_naming_it(
    fleet: Any, publisher: Any, client_as: Any
) -> None:
    # Given a publisher
    client = client_as(publisher)

    # When a device id with a NUL is revoked (PostgreSQL cannot even compare with it)
    response = client.post("/api/v1/fleets/fleet-a/devices/ab%00c/revoke")

    # Then it is a 400 naming the path parameter, not a server error
    assert _refused_fields(response) == ["device_id"]


def test_query_parameters__in_range__answered(fleet: Any, viewer: Any, client_as: Any) -> None:
    # Given a viewer
    client = client_as(viewer)

    # When the parameters are within their declared types and ranges
    devices = client.get(DEVICES, {"online": "false", "limit": 1000, "version": 1})
    metrics = client.get(METRICS, {"window": "400d", "group_by": "cell,route", "scores": "true"})

    # Then both are answered
    assert devices.status_code == 200, devices.content
    assert metrics.status_code == 200, metrics.content
    assert metrics.json()["group_by"] == ["task_type", "latency_budget", "privacy_tier", "route"]


def test_version_document__download_false__no_attachment(
    fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given a viewer
    client = client_as(viewer)

    # When the document is fetched with download=false, then with download=true
    inline = client.get("/api/v1/fleets/fleet-a/versions/1/document?download=false")
    attached = client.get("/api/v1/fleets/fleet-a/versions/1/document?download=true")

    # Then only the second is an attachment
    assert "Content-Disposition" not in inline
    assert attached["Content-Disposition"].startswith("attachment;")


# --- the schema ---------------------------------------------------------------------------------


@pytest.fixture
def schema(api_client: Any, viewer: Any) -> dict[str, Any]:
    api_client.force_authenticate(viewer)
    response = api_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return dict(response.json())


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]


def test_schema__generation__no_warnings_or_errors(tmp_path: Path) -> None:
    # Given / When the schema is generated as CI does, failing on any warning
    out, err = StringIO(), StringIO()
    call_command(
        "spectacular",
        "--validate",
        "--fail-on-warn",
        "--file",
        str(tmp_path / "schema.yaml"),
        stdout=out,
        stderr=err,
    )

    # Then nothing was warned about (an undescribable view or field would be)
    assert "Warning" not in err.getvalue(), err.getvalue()
    assert (tmp_path / "schema.yaml").stat().st_size > 0


def test_schema__every_json_answer__a_named_component(schema: dict[str, Any]) -> None:
    # Given every operation's answers
    free_form = []
    for path, method, operation in _operations(schema):
        for status, response in operation["responses"].items():
            content = response.get("content", {}).get("application/json")
            if content is None:
                continue
            # When one answers JSON, then its body is a component, never a free-form object
            if "$ref" not in content["schema"]:
                free_form.append((method, path, status))
    assert free_form == []


def test_schema__every_operation__its_error_statuses_with_the_error_body(
    schema: dict[str, Any],
) -> None:
    # Given every operation
    problems = []
    for path, method, operation in _operations(schema):
        responses = operation["responses"]
        expected = {"400"}
        if operation.get("security") and {} not in operation["security"]:
            expected.add("401")
        if "{" in path:
            expected.add("404")
        if method != "get":
            expected.add("413")
        # When its error statuses are read, then each is listed with the error body
        for status in expected:
            if status not in responses:
                problems.append((method, path, status, "missing"))
                continue
            ref = responses[status]["content"]["application/json"]["schema"]["$ref"]
            if not ref.endswith("/Error"):
                problems.append((method, path, status, ref))
    assert problems == []


def test_schema__draft_edits_and_telemetry__their_own_statuses(schema: dict[str, Any]) -> None:
    # Given the draft edits, the telemetry ingest and the rollout actions
    paths = schema["paths"]

    # When their answers are read
    publish = paths["/api/v1/fleets/{slug}/draft/publish/"]["post"]["responses"]
    cells = paths["/api/v1/fleets/{slug}/draft/cells/"]["patch"]["responses"]
    telemetry = paths["/api/v1/telemetry"]["post"]["responses"]
    advance = paths["/api/v1/fleets/{slug}/rollout/advance"]["post"]["responses"]

    # Then a stale revision (409), a missing one (428) and the rate limit (429) are documented,
    # with an example of the error body
    assert {"409", "428"} <= set(publish)
    assert {"409", "428"} <= set(cells)
    assert {"202", "400", "401", "413", "429"} <= set(telemetry)
    assert "409" in advance
    example = next(iter(publish["428"]["content"]["application/json"]["examples"].values()))
    assert example["value"]["error"]["code"] == "revision_required"


def test_schema__security__device_token_and_operator_auth(schema: dict[str, Any]) -> None:
    # Given the schema's security schemes
    schemes = schema["components"]["securitySchemes"]
    paths = schema["paths"]

    # When the device and operator operations are read
    device_policy = paths["/api/v1/devices/me/policy"]["get"]["security"]
    telemetry = paths["/api/v1/telemetry"]["post"]["security"]
    fleets = paths["/api/v1/fleets/"]["get"]["security"]
    enroll = paths["/api/v1/devices/enroll"]["post"].get("security", [])

    # Then devices use the bearer device token, operators a DRF token or the session cookie,
    # and enrolment (which issues the token) needs neither
    assert schemes["deviceToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["deviceToken"]["description"],
    }
    assert schemes["tokenAuth"]["in"] == "header"
    assert device_policy == telemetry == [{"deviceToken": []}]
    assert {"tokenAuth": []} in fleets
    assert {"cookieAuth": []} in fleets
    assert enroll in ([], [{}])


def test_schema__telemetry_feedback__device_token_bounds_and_statuses(
    schema: dict[str, Any],
) -> None:
    # Given the late feedback operation
    operation = schema["paths"]["/api/v1/telemetry/feedback"]["post"]
    components = schema["components"]["schemas"]
    body = components["TelemetryFeedbackBatchRequest"]["properties"]["feedback"]
    item = components["TelemetryFeedbackItemRequest"]

    # Then devices send it with their token, 1 to 1,000 items of a UUID and a quality 0 to 1,
    # and its refusals are documented like telemetry's
    assert operation["security"] == [{"deviceToken": []}]
    assert (body["minItems"], body["maxItems"]) == (1, 1000)
    assert item["properties"]["event_id"]["format"] == "uuid"
    quality = item["properties"]["quality"]
    assert (quality["minimum"], quality["maximum"]) == (0, 1)
    assert set(item["required"]) == {"event_id", "quality"}
    assert {"202", "400", "401", "413", "429"} <= set(operation["responses"])


def test_schema__query_parameters__typed_and_bounded(schema: dict[str, Any]) -> None:
    # Given the device list and the metrics operations
    devices = schema["paths"]["/api/v1/fleets/{slug}/devices/"]["get"]["parameters"]
    metrics = schema["paths"]["/api/v1/metrics/fleets/{slug}/"]["get"]["parameters"]
    by_name = {p["name"]: p["schema"] for p in [*devices, *metrics] if p["in"] == "query"}

    # When their query parameters are read, then each has its type and range
    assert by_name["online"]["type"] == "boolean"
    assert by_name["limit"]["type"] == "integer"
    assert by_name["scores"]["type"] == "boolean"
    assert by_name["cohort"]["enum"] == ["stable", "candidate"]
    assert by_name["platform"]["maxLength"] == 64
    assert "pattern" in by_name["window"]


def test_draft_discard__revision_as_query_parameter__discarded(
    fleet: Any, editor: Any, client_as: Any
) -> None:
    # Given a draft at revision 1 (a DELETE has no body in OpenAPI)
    client = client_as(editor)
    assert client.post("/api/v1/fleets/fleet-a/draft/", {}).status_code == 201

    # When it is discarded with ?revision=abc, then with ?revision=1
    bad = client.delete("/api/v1/fleets/fleet-a/draft/?revision=abc")
    good = client.delete("/api/v1/fleets/fleet-a/draft/?revision=1")

    # Then the first is a 400 naming `revision`, the second discards the draft
    assert _refused_fields(bad) == ["revision"]
    assert good.status_code == 204
    assert client.get("/api/v1/fleets/fleet-a/draft/").status_code == 404


def test_dashboard_api__empty_window__400_naming_it(
    fleet: Any, viewer: Any, client_as: Any
) -> None:
    # Given / When a viewer asks for the dashboard with an empty window
    response = client_as(viewer).get("/api/v1/fleets/fleet-a/dashboard?window=")

    # Then it is refused, naming `window` (the schema's window is one of 15m, 1h, 24h, 7d)
    assert _refused_fields(response) == ["window"]


def test_api__no_such_route__json_404(viewer: Any, client_as: Any) -> None:
    # Given / When a path under /api/ that no route matches is asked for
    response = client_as(viewer).get("/api/v1/fleets/not a slug/")

    # Then the answer is the API's JSON error body, not the HTML page
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_api__form_encoded_body__415(fleet: Any, publisher: Any, client_as: Any) -> None:
    # Given a publisher
    client = client_as(publisher)

    # When a fleet is created with a form-encoded body instead of JSON
    response = client.post(
        "/api/v1/fleets/", "slug=x&name=X", content_type="application/x-www-form-urlencoded"
    )

    # Then it is refused as an unsupported media type (the API speaks JSON, as its schema says)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
