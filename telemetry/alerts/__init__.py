"""Alerts: a fleet's rules and their evaluation, rollout guards, webhooks and their delivery,
the alerts page and the live banner feed (docs/alerts.md)."""
