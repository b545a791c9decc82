"""Where Celery finds the lab's tasks (`autodiscover_tasks` imports `<app>.tasks`).

The backtest task keeps its name `telemetry.backtest_run` (from before the lab was its own
app), which Celery beat and queued messages use.
"""

from .backtests.tasks import run_backtest

__all__ = ["run_backtest"]
