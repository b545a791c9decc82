"""What the APIs of other parts (telemetry) use of routing_policies: a device's token
authentication and the rollout's answer schema. A facade, so they never reach into
`routing_policies.devices` or `routing_policies.rollouts`."""

from .devices.apis import DeviceTokenAuthentication, IsDevice
from .rollouts.schemas import RolloutSerializer

__all__ = ["DeviceTokenAuthentication", "IsDevice", "RolloutSerializer"]
