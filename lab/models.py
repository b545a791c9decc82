"""Where Django finds the lab's models (app label `lab`): each part keeps its own."""

from .backtests.models import Backtest, BacktestStatus

__all__ = ["Backtest", "BacktestStatus"]
