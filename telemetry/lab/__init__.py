"""The policy lab (docs/lab.md): playground, backtest and calibration over recorded events."""
