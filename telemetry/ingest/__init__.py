"""Ingest: device batches validated and landed (`POST /api/v1/telemetry`, answered in front of
Django by `fastpath`), then processed by Celery into raw events and partial rollup rows."""
