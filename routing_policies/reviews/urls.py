"""API routes of change governance (under /api/v1/): (route, view, name) each."""

from django.urls import path

from . import apis

FLEET = "fleets/<slug:slug>"
CR = f"{FLEET}/change-requests/<int:request_id>"

ROUTES = [
    (f"{FLEET}/freeze", apis.FleetFreezeApi, "api-fleet-freeze"),
    (f"{FLEET}/freeze/release", apis.FleetFreezeReleaseApi, "api-fleet-freeze-release"),
    (f"{FLEET}/review-settings", apis.ReviewSettingsApi, "api-review-settings"),
    (f"{FLEET}/change-requests/", apis.ChangeRequestListApi, "api-change-request-list"),
    (f"{CR}/", apis.ChangeRequestDetailApi, "api-change-request"),
    (f"{CR}/comments", apis.ChangeRequestCommentApi, "api-change-request-comment"),
    (f"{CR}/approve", apis.ChangeRequestApproveApi, "api-change-request-approve"),
    (f"{CR}/reject", apis.ChangeRequestRejectApi, "api-change-request-reject"),
    (f"{CR}/withdraw", apis.ChangeRequestWithdrawApi, "api-change-request-withdraw"),
    (f"{CR}/publish", apis.ChangeRequestPublishApi, "api-change-request-publish"),
    ("change-requests/mine", apis.ChangeRequestsForMeApi, "api-change-requests-mine"),
]
urlpatterns = [path(route, view.as_view(), name=name) for route, view, name in ROUTES]
