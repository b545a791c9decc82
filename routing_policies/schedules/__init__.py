"""Scheduled changes: a publish, a rollout start, a stage of a stage plan, a switch or a
cloud-pressure window at a time, run exactly once by the beat (docs/governance.md)."""
