"""Telemetry: durable batched ingest, raw events by day, rollups with latency sketches,
routing figures for operators and Prometheus (docs/telemetry.md). Alerts and dashboards next."""
