"""API routes of backtests, mounted under /api/v1/ (lab.urls)."""

from django.urls import path

from . import apis

urlpatterns = [
    path(
        "fleets/<slug:slug>/lab/backtests",
        apis.BacktestListApi.as_view(),
        name="api-backtests",
    ),
    path(
        "fleets/<slug:slug>/lab/backtests/<int:backtest_id>",
        apis.BacktestDetailApi.as_view(),
        name="api-backtest",
    ),
]
