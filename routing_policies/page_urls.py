"""Page routes of the policy editor."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.fleet_list_page, name="fleet-list"),
]
