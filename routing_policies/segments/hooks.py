"""Where devices (a part above) plug into segments, which never import them: the census of a
fleet's enrolled devices by attributes, registered when the app is ready
(`RoutingPoliciesConfig.ready`, routing_policies/receivers.py)."""

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..policies.models import Fleet

# A fleet's enrolled (not revoked) devices grouped by their attributes: (attributes as rules
# read them, how many devices have exactly those).
AttributeCensus = Callable[[Fleet], list[tuple[dict[str, Any], int]]]
_census: AttributeCensus | None = None


def attribute_census_register(census: AttributeCensus) -> None:
    """Install the reader of a fleet's census (a second call replaces the first)."""
    global _census
    _census = census


def attribute_census(fleet: Fleet) -> list[tuple[dict[str, Any], int]]:
    """The fleet's census, as the registered reader takes it."""
    if _census is None:
        raise ImproperlyConfigured(
            "No attribute census is registered: routing_policies.devices registers it when the "
            "app is ready (RoutingPoliciesConfig.ready)."
        )
    return _census(fleet)
