"""The policy lab (issue #14): playground, backtest and calibration, on `edge_sdk.decision`."""
