"""Calibration of θ per cell for a target, over recorded events (docs/lab.md)."""
