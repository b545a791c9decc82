"""Page routes of the playground (lab.page_urls)."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/lab/", views.lab_page, name="fleet-lab"),
    path("fleets/<slug:slug>/lab/cloud-price/", views.lab_cloud_price, name="fleet-cloud-price"),
]
