"""Page routes of backtests (lab.page_urls; the API is in `backtests.urls`)."""

from django.urls import path

from . import views

urlpatterns = [
    path("fleets/<slug:slug>/lab/backtests/", views.backtests_page, name="fleet-backtests"),
    path(
        "fleets/<slug:slug>/lab/backtests/start/",
        views.backtest_start,
        name="fleet-backtest-start",
    ),
]
