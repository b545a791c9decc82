"""The parts above policies plug into its writes and pages (policies/signals.py): connected
once the models are loaded, by `RoutingPoliciesConfig.ready()`."""

from .reviews import receivers as reviews
from .rollouts import receivers as rollouts


def connect() -> None:
    """Connect every part's receivers (idempotent: each has a dispatch_uid)."""
    reviews.connect()
    rollouts.connect()
