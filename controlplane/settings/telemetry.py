"""Telemetry (docs/telemetry.md): retention, ingest limits, processing, live dashboards."""

from controlplane.settings.env import from_environment

# Raw events are kept TELEMETRY_RETENTION_DAYS (and events older than that are refused);
# minute rollups and hour rollups longer.
TELEMETRY_RETENTION_DAYS: int = 7
TELEMETRY_MINUTE_ROLLUP_RETENTION_DAYS: int = 30
TELEMETRY_HOUR_ROLLUP_RETENTION_DAYS: int = 400
# Per device: at most this many batches per window (0 turns the limit off).
TELEMETRY_RATE_LIMIT_BATCHES: int = 120
TELEMETRY_RATE_LIMIT_WINDOW_S: int = 60
# One processing transaction takes up to this many landed batches.
TELEMETRY_PROCESS_MAX_BATCHES: int = 20
# A worker whose transaction found few batches waits this long before the next (fuller ones).
TELEMETRY_PROCESS_LINGER_S: float = 0.2
# Threads per web process landing telemetry batches at once (0: Django's one sync thread).
TELEMETRY_INGEST_THREADS: int = 4
# Drains at once when landed batches pile up (the first wakes helpers; telemetry/wakeup.py).
TELEMETRY_DRAINS: int = 2
# Landed batches older than this are re-enqueued by the sweeper (their task was lost).
TELEMETRY_SWEEP_AFTER_S: float = 5.0
TELEMETRY_SWEEP_INTERVAL_S: float = 10.0
TELEMETRY_COMPACT_INTERVAL_S: float = 30.0
# /metrics asks for `Authorization: Bearer <METRICS_TOKEN>` when set; open when empty.
METRICS_TOKEN: str = ""
# Live dashboards (telemetry/dashboard_feed.py): at most one push per fleet this often (a burst
# of batches is one or two updates); refresh open views this often anyway.
DASHBOARD_PUSH_DELAY_S: float = 1.0
DASHBOARD_REFRESH_INTERVAL_S: float = 15.0

from_environment(globals())
