"""Rollouts: a fleet's routing state, staged rollouts, immediate switches and cloud pressure,
the rollout page and API."""
