"""API routes of change governance (under /api/v1/)."""

from django.urls import path

from . import apis

CR = "fleets/<slug:slug>/change-requests/<int:request_id>"

urlpatterns = [
    path("fleets/<slug:slug>/freeze", apis.FleetFreezeApi.as_view(), name="api-fleet-freeze"),
    path(
        "fleets/<slug:slug>/freeze/release",
        apis.FleetFreezeReleaseApi.as_view(),
        name="api-fleet-freeze-release",
    ),
    path(
        "fleets/<slug:slug>/review-settings",
        apis.ReviewSettingsApi.as_view(),
        name="api-review-settings",
    ),
    path(
        "fleets/<slug:slug>/change-requests/",
        apis.ChangeRequestListApi.as_view(),
        name="api-change-request-list",
    ),
    path(f"{CR}/", apis.ChangeRequestDetailApi.as_view(), name="api-change-request"),
    path(
        f"{CR}/comments", apis.ChangeRequestCommentApi.as_view(), name="api-change-request-comment"
    ),
    path(
        f"{CR}/approve", apis.ChangeRequestApproveApi.as_view(), name="api-change-request-approve"
    ),
    path(f"{CR}/reject", apis.ChangeRequestRejectApi.as_view(), name="api-change-request-reject"),
    path(
        f"{CR}/withdraw",
        apis.ChangeRequestWithdrawApi.as_view(),
        name="api-change-request-withdraw",
    ),
    path(
        f"{CR}/publish", apis.ChangeRequestPublishApi.as_view(), name="api-change-request-publish"
    ),
    path(
        "change-requests/mine",
        apis.ChangeRequestsForMeApi.as_view(),
        name="api-change-requests-mine",
    ),
]
