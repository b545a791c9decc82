"""The HTTP API: Django REST framework, the OpenAPI schema and who may read its docs."""

from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.env import env

REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header makes an anonymous request a 401, not a 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.permissions.IsViewer"],
    # JSON only, through controlplane.json_guard: depth, NUL / lone surrogates and non-finite
    # numbers refused naming the field (a form or multipart body is a 415).
    "DEFAULT_PARSER_CLASSES": ["controlplane.parsers.GuardedJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_SCHEMA_CLASS": "controlplane.openapi.ApiAutoSchema",
    "EXCEPTION_HANDLER": "controlplane.exceptions.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Edge routing control plane API",
    "DESCRIPTION": "Routing policy table, versions, diffs and audit log. Device protocol v1.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # A PATCH body is described as it must be sent (its required fields stay required).
    "COMPONENT_SPLIT_PATCH": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlplane.openapi.postprocess_closed_bodies",
        # The device bodies' msgspec structs (telemetry ingest and feedback) as JSON Schema.
        "telemetry.structs.postprocess_struct_bodies",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # API_DOCS_ACCESS below: logged-in users and API tokens, or everyone.
    "SERVE_PERMISSIONS": ["controlplane.api_docs.CanReadApiDocs"],
    # Choice sets that share a field name get names of their own (generated clients' enums).
    "ENUM_NAME_OVERRIDES": {
        "VersionStatusEnum": ["draft", "published"],
        "DiffCellStatusEnum": ["changed", "added", "removed"],
        "DeliveryStatusEnum": ["pending", "delivered", "failed"],
        "RolloutStageEnum": [(5, 5), (25, 25), (100, 100)],
        "AlertMetricEnum": "telemetry.alerts.models.Metric.values",
        "GuardMetricEnum": "telemetry.alerts.judging.GUARD_METRICS",
        "CellFallbackEnum": "routing_policies.cell_schema.FALLBACKS",
        "EventFallbackEnum": "telemetry.ingest.events.FALLBACK_KINDS",
        # Change governance (routing_policies/reviews, routing_policies/schedules).
        "ChangeRequestStateEnum": ["open", "done", "closed"],
        "ChangeRequestKindEnum": ["publish", "rollout_start", "switch"],
        "ChangeRequestStatusEnum": ["pending", "approved", "rejected", "done", "closed"],
        "ScheduleStateEnum": ["pending", "done", "skipped", "cancelled"],
        "ScheduleKindEnum": [
            "publish",
            "rollout_start",
            "rollout_advance",
            "switch",
            "cloud_pressure",
        ],
        "PublishKindEnum": ["publish"],
        "VersionChangeKindEnum": ["rollout_start", "switch"],
        "AdvanceKindEnum": ["rollout_advance"],
        "CloudPressureKindEnum": ["cloud_pressure"],
        "LaterStageEnum": [(25, 25), (100, 100)],
        "TimeZoneEnum": "routing_policies.schedules.schemas.TIME_ZONES",
    },
}
# Who reads /api/schema/ and /api/docs/ (controlplane/api_docs.py): `authenticated` (any
# logged-in user or API token) or `public`.
API_DOCS_ACCESS = env.str("API_DOCS_ACCESS", default="authenticated")
if API_DOCS_ACCESS not in ("authenticated", "public"):
    raise ImproperlyConfigured(
        f"API_DOCS_ACCESS={API_DOCS_ACCESS!r}: use `authenticated` (the default) or `public`"
    )
