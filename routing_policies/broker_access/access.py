"""The access rule of the MQTT link, written once (docs/mqtt-brokers.md):

- a device's username and client id are `{fleet}/{device_id}`, its password its device token;
- it may publish only on its own topics (`…/fleets/{fleet}/devices/{device_id}/{ack,presence,
  telemetry}`) and subscribe only to its fleet's (`…/fleets/{fleet}/state`, `…/versions/+` or
  one version, `…/versions/+/protobuf` or one version's, `…/cloud_pressure`);
- the control plane's own account may publish and subscribe under the topic prefix.

The HTTP hooks apply it per request; the dynamic-security roles spell it out for Mosquitto.
Topics come from edge_sdk.mqtt_topics, never formatted here.
"""

import re
from typing import Any, Final, Literal, NamedTuple

from django.conf import settings

from edge_sdk import mqtt_topics

from ..devices.apis import DEVICE_ID_RE

FLEET_SLUG_RE: Final = re.compile(r"\A[-a-zA-Z0-9_]+\Z")
VERSION_RE: Final = re.compile(r"\A(?:\+|[1-9][0-9]{0,9})\Z")
Action = Literal["publish", "subscribe"]
ACTIONS: Final = ("publish", "subscribe")


class DeviceName(NamedTuple):
    """The fleet slug and device id an MQTT username (or client id) names."""

    fleet: str
    device_id: str

    @property
    def username(self) -> str:
        return device_username(self.fleet, self.device_id)


def device_username(fleet: str, device_id: str) -> str:
    """A device's MQTT username and client id (neither part contains "/")."""
    return f"{fleet}/{device_id}"


def parse_device_username(username: str) -> DeviceName | None:
    """The device a username names; None for anything else (the control plane's, a stranger's)."""
    fleet, slash, device_id = username.partition("/")
    if not slash or not FLEET_SLUG_RE.match(fleet) or not DEVICE_ID_RE.match(device_id):
        return None
    return DeviceName(fleet, device_id)


def topic_prefix() -> str:
    """MQTT_TOPIC_PREFIX (the link's setting), edge_sdk's default when unset."""
    return str(getattr(settings, "MQTT_TOPIC_PREFIX", "") or mqtt_topics.DEFAULT_PREFIX)


def controlplane_username() -> str:
    """The control plane's own MQTT account (MQTT_USERNAME), "" when it has none."""
    return str(getattr(settings, "MQTT_USERNAME", "") or "")


def device_publish_topics(prefix: str, name: DeviceName) -> list[str]:
    """The only topics the device may publish on."""
    return [
        mqtt_topics.device_topic(prefix, name.fleet, name.device_id, kind)
        for kind in mqtt_topics.DEVICE_TOPICS
    ]


def fleet_subscribe_filters(prefix: str, fleet: str) -> list[str]:
    """The filters a device of `fleet` may subscribe with (one version, too: see below)."""
    return [
        mqtt_topics.fleet_state(prefix, fleet),
        mqtt_topics.fleet_version(prefix, fleet, "+"),
        mqtt_topics.fleet_version_protobuf(prefix, fleet, "+"),
        mqtt_topics.fleet_cloud_pressure(prefix, fleet),
    ]


def device_may(name: DeviceName, topic: str, action: Action, prefix: str) -> bool:
    """Whether the device may publish on `topic`, or subscribe with the filter `topic`."""
    if action == "publish":
        return topic in device_publish_topics(prefix, name)
    if topic in fleet_subscribe_filters(prefix, name.fleet):
        return True
    # One version's document: `…/versions/7` (what the SDK fetches when it needs one), or its
    # protobuf twin `…/versions/7/protobuf`.
    versions = mqtt_topics.fleet_version(prefix, name.fleet, "")
    if not topic.startswith(versions):
        return False
    number = topic[len(versions) :].removesuffix(mqtt_topics.PROTOBUF_SUFFIX)
    return bool(VERSION_RE.match(number))


def controlplane_may(topic: str, prefix: str) -> bool:
    """The control plane's account: anything under the prefix, shared subscriptions included."""
    shared = mqtt_topics.shared("")
    if topic.startswith("$share/"):
        if not topic.startswith(shared):
            return False
        topic = topic[len(shared) :]
    return topic.startswith(f"{prefix}/")


# --- the same rule as dynamic-security roles (Mosquitto) ---------------------------------------

CONTROLPLANE_ROLE: Final = "edge-controlplane"


def fleet_role(fleet: str) -> str:
    return f"fleet:{fleet}"


def device_role(name: DeviceName) -> str:
    return f"device:{name.username}"


def _acls(acltype: str, topics: list[str]) -> list[dict[str, Any]]:
    return [{"acltype": acltype, "topic": topic, "allow": True} for topic in topics]


def fleet_role_acls(prefix: str, fleet: str) -> list[dict[str, Any]]:
    """The fleet's topics, for subscribing (`subscribePattern` also admits `…/versions/7`
    under `…/versions/+`, `…/versions/7/protobuf` under `…/versions/+/protobuf`); receiving
    is the plugin's default (allowed)."""
    return _acls("subscribePattern", fleet_subscribe_filters(prefix, fleet))


def device_role_acls(prefix: str, name: DeviceName) -> list[dict[str, Any]]:
    """The device's own topics, for publishing (a last will on presence included: the broker
    checks it at connect). Mosquitto 2.0.11's dynamic-security plugin does not substitute
    %u / %c in role topics (tests/integration/test_mqtt_access.py), so each device needs its
    own role: docs/mqtt-brokers.md says what that costs."""
    return _acls("publishClientSend", device_publish_topics(prefix, name))


def controlplane_role_acls(prefix: str) -> list[dict[str, Any]]:
    """Publish the fleets' topics, subscribe (shared) to the devices' topics."""
    everything = f"{prefix}/fleets/#"
    return [
        *_acls("publishClientSend", [everything]),
        *_acls("subscribePattern", [everything, mqtt_topics.shared(everything)]),
    ]
