"""Old import path, kept for telemetry/apis.py until it imports from
`routing_policies.devices.apis` and `routing_policies.validation`; nothing in routing_policies
uses it."""

from ..devices.apis import DeviceTokenAuthentication, IsDevice
from ..validation import MAX_VERSION

__all__ = ["MAX_VERSION", "DeviceTokenAuthentication", "IsDevice"]
