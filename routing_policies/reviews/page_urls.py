"""Page routes of change governance."""

from django.urls import path

from . import views

CR = "fleets/<slug:slug>/reviews/<int:request_id>"

urlpatterns = [
    path("reviews/", views.reviews_for_me, name="reviews-for-me"),
    path("fleets/<slug:slug>/reviews/", views.review_list, name="fleet-reviews"),
    path("fleets/<slug:slug>/reviews/open/", views.change_request_open, name="change-request-open"),
    path("fleets/<slug:slug>/reviews/settings/", views.review_settings, name="review-settings"),
    path(f"{CR}/", views.change_request_page, name="change-request"),
    path(f"{CR}/comment/", views.change_request_comment, name="change-request-comment"),
    path(f"{CR}/approve/", views.change_request_approve, name="change-request-approve"),
    path(f"{CR}/reject/", views.change_request_reject, name="change-request-reject"),
    path(f"{CR}/withdraw/", views.change_request_withdraw, name="change-request-withdraw"),
    path(f"{CR}/publish/", views.change_request_publish, name="change-request-publish"),
    path("fleets/<slug:slug>/freeze/release/", views.freeze_release, name="freeze-release"),
]
