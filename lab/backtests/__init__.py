"""Backtests: a version or the draft replayed over a window of recorded events (docs/lab.md)."""
