"""What the pages of other parts (telemetry, the lab) use from policies: the fleet a page's URL
names, the views of a fleet's pages that find it, and the input of the fleet's cloud price (the
page that sets it validates with the API's own serializer)."""

from .policies.pages import fleet_action, fleet_or_404, fleet_page
from .policies.schemas import FleetCloudPriceInputSerializer

__all__ = ["FleetCloudPriceInputSerializer", "fleet_action", "fleet_or_404", "fleet_page"]
