"""What the APIs of other parts (telemetry) use of routing_policies: a device's token
authentication and the rollout's answer schema; and of the lab and the autopilot, the fleet
action API (`FleetActionApi`, declared by a `FleetAction`). A facade, so they never reach into
`routing_policies.devices` or `routing_policies.rollouts`."""

from .devices.apis import DeviceTokenAuthentication, IsDevice
from .policies.fleet_api import Answer, FleetAction, FleetActionApi, FleetReadApi
from .rollouts.schemas import RolloutSerializer

__all__ = [
    "Answer",
    "DeviceTokenAuthentication",
    "FleetAction",
    "FleetActionApi",
    "FleetReadApi",
    "IsDevice",
    "RolloutSerializer",
]
