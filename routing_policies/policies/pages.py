"""What the pages of every part share about fleets: the fleet a page's URL names, and the views
of a fleet's pages (`fleet_page`, `fleet_action`) that find it.

Here, beside the fleet model, and not in the shared `controlplane.pages`, so the shared layer
depends on no part (issue 23); telemetry and lab pages import it from here."""

from django.http import Http404

from controlplane.exceptions import NotFound
from controlplane.pages import FleetPages

from .models import Fleet
from .selectors import fleet_get


def fleet_or_404(slug: str) -> Fleet:
    """The fleet a page's URL names, or the 404 page."""
    try:
        return fleet_get(slug=slug)
    except NotFound as exc:
        raise Http404(exc.message) from None


_fleet_pages = FleetPages(fleet_or_404)
fleet_page = _fleet_pages.page
fleet_action = _fleet_pages.action
