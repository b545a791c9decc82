"""The HTTP hooks' decisions (EMQX, HiveMQ, VerneMQ ask on every connect, publish and
subscribe): the devices' table is read each time, so a revoked or replaced token is refused
at once. Answers are `allow`, `deny`, or `ignore` for a username that names no device and is
not the control plane's (another authenticator of the broker's chain may know it)."""

import hmac
from typing import Final, Literal

from django.conf import settings

from ..devices.models import Device
from ..devices.selectors import device_authenticate
from ..devices.tokens import hash_secret
from . import access
from .access import Action

Result = Literal["allow", "deny", "ignore"]
RESULTS: Final = ("allow", "deny", "ignore")


def _controlplane_password_matches(password: str) -> bool:
    expected = str(getattr(settings, "MQTT_PASSWORD", "") or "")
    return bool(expected) and hmac.compare_digest(password.encode(), expected.encode())


def mqtt_authenticate(*, username: str, password: str, clientid: str) -> Result:
    """May this client connect? A device: its live token, its own username as client id."""
    if username and username == access.controlplane_username():
        return "allow" if _controlplane_password_matches(password) else "deny"
    name = access.parse_device_username(username)
    if name is None:
        return "ignore"
    if clientid != name.username:
        return "deny"
    device = device_authenticate(password)
    if device is None or (device.fleet.slug, device.device_id) != name:
        return "deny"
    return "allow"


def mqtt_session_fingerprint(password: str) -> str:
    """What the broker may attach to the session (EMQX client_attrs) and send back with each
    authorisation question, so that a session opened with a token since replaced is refused."""
    return mqtt_session_fingerprint_of(hash_secret(password))


def mqtt_session_fingerprint_of(token_hash: str) -> str:
    """`mqtt_session_fingerprint` from the token's stored hash."""
    return token_hash[:16]


def mqtt_authorize(*, username: str, topic: str, action: Action, session: str = "") -> Result:
    """May this client publish on (or subscribe with) `topic`? A device only while it is live,
    and, when the broker sends the session's fingerprint, only with its current token."""
    prefix = access.topic_prefix()
    if username and username == access.controlplane_username():
        return "allow" if access.controlplane_may(topic, prefix) else "deny"
    name = access.parse_device_username(username)
    if name is None:
        return "ignore"
    if not access.device_may(name, topic, action, prefix):
        return "deny"
    token_hash = (
        Device.objects.live()
        .filter(fleet__slug=name.fleet, device_id=name.device_id)
        .values_list("token_hash", flat=True)
        .first()
    )
    if token_hash is None or (session and session != mqtt_session_fingerprint_of(token_hash)):
        return "deny"
    return "allow"
