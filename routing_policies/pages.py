"""What the pages of other parts (telemetry, the lab) use of routing_policies: the fleet a
page's URL names. A facade, so they never reach into `routing_policies.policies`."""

from .policies.pages import fleet_or_404

__all__ = ["fleet_or_404"]
