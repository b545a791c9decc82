"""Old import path, kept for telemetry/api_schemas.py until it imports
`routing_policies.rollouts.schemas`; nothing in routing_policies uses it."""

from ..rollouts.schemas import RolloutSerializer

__all__ = ["RolloutSerializer"]
