"""Telemetry ingest benchmark: end to end vs COPY, 24-hour percentiles vs percentile_cont."""
