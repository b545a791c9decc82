"""The MQTT device link (docs/PROTOCOL.md, "MQTT"): the broker the control plane publishes
fleet state to and reads devices' acks, presence and telemetry from. Empty MQTT_URL (the
embedded default): no link, devices use the WebSocket path only."""

from controlplane.settings.env import from_environment

# mqtt://host:1883 or mqtts://host:8883 (TLS); empty: the MQTT link is off.
MQTT_URL: str = ""
MQTT_TOPIC_PREFIX: str = "edge-routing/v1"
# The control plane's own account on the broker (empty: anonymous).
MQTT_USERNAME: str = ""
MQTT_PASSWORD: str = ""
# TLS (mqtts://): the broker's certificate is checked against MQTT_CA_FILE (a PEM bundle: a
# private CA), else the system's CA store; MQTT_CERT_FILE and MQTT_KEY_FILE (PEM) are the control
# plane's client certificate for brokers that ask for one (mutual TLS, as AWS IoT Core does).
MQTT_CA_FILE: str = ""
MQTT_CERT_FILE: str = ""
MQTT_KEY_FILE: str = ""
# `manage.py mqtt_link` re-checks every fleet's retained state this often and publishes what a
# failed publish left out (only what differs: an unchanged fleet costs no publish).
MQTT_RECONCILE_S: float = 30.0

from_environment(globals())
