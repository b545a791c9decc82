"""The backtest's Celery task (thin: one service); embedded mode runs it in process."""

from __future__ import annotations

from celery import shared_task

from .services import backtest_run


@shared_task(name="telemetry.backtest_run", ignore_result=True)  # type: ignore[untyped-decorator]
def run_backtest(backtest_id: int) -> None:
    """Replay one queued backtest (lab.backtests.services.backtest_run)."""
    backtest_run(backtest_id=backtest_id)


def backtest_enqueue(backtest_id: int) -> None:
    """Queue the run (lab.apps registers this as the backtest service's queue)."""
    run_backtest.delay(backtest_id)
