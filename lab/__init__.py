"""The policy lab (docs/lab.md): playground, backtest and calibration, every decision by
`edge_sdk.decision` over the fleet's recorded events."""
