"""API routes of the lab, mounted under /api/v1/ (controlplane/urls.py): the playground,
calibration and backtests under `fleets/<slug>/lab/`; the pages are in `lab.page_urls`."""

from django.urls import path

from .backtests import apis as backtests
from .calibration import apis as calibration
from .playground import apis as playground

LAB = "fleets/<slug:slug>/lab/"

urlpatterns = [
    path(f"{LAB}explain", playground.ExplainApi.as_view(), name="api-lab-explain"),
    path(f"{LAB}calibrations", calibration.CalibrationApi.as_view(), name="api-lab-calibrations"),
    path(
        f"{LAB}calibrations/apply",
        calibration.CalibrationApplyApi.as_view(),
        name="api-lab-calibrations-apply",
    ),
    path(f"{LAB}backtests", backtests.BacktestListApi.as_view(), name="api-backtests"),
    path(
        f"{LAB}backtests/<int:backtest_id>",
        backtests.BacktestDetailApi.as_view(),
        name="api-backtest",
    ),
]
