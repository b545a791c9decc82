"""Page routes of the lab (controlplane/urls.py): the playground, calibration and backtests
under `/fleets/<slug>/lab/`; the API is in `lab.urls`."""

from django.urls import path

from .backtests import views as backtests
from .calibration import views as calibration
from .playground import views as playground

LAB = "fleets/<slug:slug>/lab/"

urlpatterns = [
    path(LAB, playground.lab_page, name="fleet-lab"),
    path(f"{LAB}cloud-price/", playground.lab_cloud_price, name="fleet-cloud-price"),
    path(f"{LAB}calibrate/", calibration.calibrate_page, name="lab-calibrate"),
    path(f"{LAB}calibrate/apply/", calibration.calibrate_apply, name="lab-calibrate-apply"),
    path(f"{LAB}backtests/", backtests.backtests_page, name="fleet-backtests"),
    path(f"{LAB}backtests/start/", backtests.backtest_start, name="fleet-backtest-start"),
]
