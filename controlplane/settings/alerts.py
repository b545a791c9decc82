"""Alerts (docs/alerts.md): how often rules are judged, and how webhooks are delivered."""

from controlplane.settings.env import from_environment

# New rollups ask for an evaluation of their fleet at most once per ALERT_EVALUATE_COALESCE_S;
# the beat evaluates every fleet each ALERT_EVALUATE_INTERVAL_S (so silence is noticed).
# Webhooks: retried after BACKOFF × 2^(n − 1) s, capped, MAX_ATTEMPTS in all.
ALERT_EVALUATE_COALESCE_S: float = 0.5
ALERT_EVALUATE_INTERVAL_S: float = 15.0
ALERT_WEBHOOK_BACKOFF_S: float = 5.0
ALERT_WEBHOOK_BACKOFF_MAX_S: float = 600.0
ALERT_WEBHOOK_MAX_ATTEMPTS: int = 6
ALERT_WEBHOOK_TIMEOUT_S: float = 5.0
# Webhooks to loopback, private, link-local and other non-public addresses are refused unless
# this is set (telemetry/services/webhooks.py: the workers sit inside the network).
ALERT_WEBHOOK_ALLOW_PRIVATE_NETWORKS: bool = False

from_environment(globals())
