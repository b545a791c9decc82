"""Old import path, kept for telemetry/fastpath.py until it imports
`routing_policies.devices.token_cache`; nothing in routing_policies uses it."""

from .devices.token_cache import device_authenticate_cached

__all__ = ["device_authenticate_cached"]
