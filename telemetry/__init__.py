"""Telemetry ingest, rollups, alerts and dashboards (later capabilities)."""
