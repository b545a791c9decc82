"""Template helpers of the policy pages: the demo logins hint of the login page."""

from django import template
from django.conf import settings

from routing_policies.demo import DEMO_ROLE_NAMES, DEMO_USERS

register = template.Library()


@register.simple_tag
def demo_logins() -> list[dict[str, str]]:
    """The demo users and passwords, only in development mode (DEBUG on), else nothing."""
    if not settings.DEBUG:
        return []
    return [
        {"username": name, "password": password, "role": DEMO_ROLE_NAMES[name]}
        for name, (_, password) in DEMO_USERS.items()
    ]
