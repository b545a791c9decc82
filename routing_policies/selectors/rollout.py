"""Old import path, kept for telemetry/selectors/dashboard.py until it imports from
`routing_policies.rollouts.selectors` (and `devices.models.online_q`); nothing in
routing_policies uses it."""

from ..devices.models import online_q
from ..rollouts.selectors import candidate_cohort_count, open_rollout, rollout_out

__all__ = ["candidate_cohort_count", "online_q", "open_rollout", "rollout_out"]
