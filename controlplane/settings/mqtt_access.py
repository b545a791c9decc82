"""Who may use the MQTT device link (routing_policies/broker_access, docs/mqtt-brokers.md).

The link's own settings (MQTT_URL, MQTT_TOPIC_PREFIX, MQTT_USERNAME, MQTT_PASSWORD) live with
the link; these say how devices' broker credentials are granted and checked.
"""

from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.env import from_environment

# `dynsec`: the control plane drives Mosquitto's dynamic-security plugin (a client per device,
# created at enrolment, deleted at revocation). `http`: the broker asks the control plane on
# every connect, publish and subscribe (EMQX, HiveMQ, VerneMQ; POST /api/v1/mqtt/auth and
# /acl, answering whenever MQTT_HOOK_SECRET is set). Empty: neither (the MQTT link is off,
# or the broker's access is managed elsewhere).
MQTT_ACCESS: str = ""
# The dynamic-security admin account (`mosquitto_ctrl dynsec init`); empty: the control
# plane's own MQTT account (MQTT_USERNAME / MQTT_PASSWORD) is the admin.
MQTT_DYNSEC_USERNAME: str = ""
MQTT_DYNSEC_PASSWORD: str = ""
# How long an enrolment waits for the broker before it gives up (and counts a failure).
MQTT_DYNSEC_TIMEOUT_S: float = 3.0
# The secret the broker sends in the `X-MQTT-Hook-Secret` header of every hook call; the hook
# endpoints answer 401 without it, and to everyone while it is empty.
MQTT_HOOK_SECRET: str = ""

from_environment(globals())
if MQTT_ACCESS not in ("", "dynsec", "http"):
    raise ImproperlyConfigured(
        f"MQTT_ACCESS={MQTT_ACCESS!r}: use `dynsec`, `http` or leave it empty"
    )
