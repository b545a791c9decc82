"""The MQTT topics of protocol v1's MQTT extension (docs/PROTOCOL.md, "MQTT"), named once.

The control plane publishes and subscribes with these names and the SDK's MQTT transport
uses the same functions, so the two never disagree on a topic. `prefix` is deployment
configuration (`MQTT_TOPIC_PREFIX` on the server, `DeviceConfig.mqtt_prefix` on a device).

Fleet topics: written by the control plane only, retained, QoS 1, read by the fleet's devices.
- `{prefix}/fleets/{fleet}/state`: the rollout state (stable, candidate, stage, salt,
  holdback, a sequence number, the newest published version); each device computes its own
  version from it.
- `{prefix}/fleets/{fleet}/versions/{n}`: published version n's policy document (immutable).
- `{prefix}/fleets/{fleet}/versions/{n}/protobuf`: the same document in protobuf (MQTT 5
  content type `application/x-protobuf`), for a device configured for protobuf; a level below,
  so a `versions/+` subscription never receives it.
- `{prefix}/fleets/{fleet}/cloud_pressure`: the live θ offset, expiring with its TTL.

Device topics: written by one device only (its credentials allow nothing else), QoS 1, read
by the control plane on shared subscriptions (`$share/{group}/…`).
- `{prefix}/fleets/{fleet}/devices/{device_id}/ack`: the version the device applied.
- `{prefix}/fleets/{fleet}/devices/{device_id}/presence`: birth (online) and last will.
- `{prefix}/fleets/{fleet}/devices/{device_id}/telemetry`: telemetry batches.
"""

from typing import Final

DEFAULT_PREFIX: Final = "edge-routing/v1"
DEVICE_TOPICS: Final = ("ack", "presence", "telemetry")
SHARE_GROUP: Final = "controlplane"
# The level under a version's topic where its protobuf document is retained.
PROTOBUF_SUFFIX: Final = "/protobuf"


def fleet_state(prefix: str, fleet: str) -> str:
    """The fleet's retained rollout state."""
    return f"{prefix}/fleets/{fleet}/state"


def fleet_version(prefix: str, fleet: str, version: int | str) -> str:
    """Published version `version`'s retained document (`+` for a subscription to all)."""
    return f"{prefix}/fleets/{fleet}/versions/{version}"


def fleet_version_protobuf(prefix: str, fleet: str, version: int | str) -> str:
    """Published version `version`'s retained document in protobuf (`+` for all of them)."""
    return f"{fleet_version(prefix, fleet, version)}{PROTOBUF_SUFFIX}"


def fleet_cloud_pressure(prefix: str, fleet: str) -> str:
    """The fleet's retained cloud-pressure offset."""
    return f"{prefix}/fleets/{fleet}/cloud_pressure"


def device_topic(prefix: str, fleet: str, device_id: str, kind: str) -> str:
    """One of a device's own topics (`kind` in DEVICE_TOPICS; `+` wildcards for a filter)."""
    return f"{prefix}/fleets/{fleet}/devices/{device_id}/{kind}"


def shared(topic_filter: str, group: str = SHARE_GROUP) -> str:
    """An MQTT 5 shared subscription: the group's subscribers split the messages."""
    return f"$share/{group}/{topic_filter}"


def parse_device_topic(prefix: str, topic: str) -> tuple[str, str, str] | None:
    """(fleet, device_id, kind) of a device topic; None for any other topic."""
    head = f"{prefix}/fleets/"
    if not topic.startswith(head):
        return None
    parts = topic[len(head) :].split("/")
    if len(parts) != 4 or parts[1] != "devices" or parts[3] not in DEVICE_TOPICS:
        return None
    fleet, _, device_id, kind = parts
    if not fleet or not device_id:
        return None
    return fleet, device_id, kind
