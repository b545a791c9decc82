"""Telemetry: one Django app, one folder per part (docs/telemetry.md).

`ingest/` (device batches, landing, processing into raw events and rollups), `dashboards/`
(dashboard, metrics API, Prometheus), `alerts/` (rules, guards, webhooks, evaluation). The
rollup models, their read side (`rollup`, `sketch`, `selectors/`) and storage maintenance
(`services/`) are at this level, shared by the parts.
"""
