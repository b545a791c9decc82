"""What the pages of other apps read of routing_policies: the fleet a page's URL names."""

from .policies.pages import fleet_or_404

__all__ = ["fleet_or_404"]
