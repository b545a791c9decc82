"""Who may use the MQTT device link: each device's broker credentials and topic rights.

Two ways, one rule (access.py): with Mosquitto the control plane drives the dynamic-security
plugin (dynsec.py, services.py: a client per device created at enrolment, deleted at
revocation, `manage.py mqtt_access sync` to reconcile); with EMQX, HiveMQ or VerneMQ the broker
asks the control plane on every connect, publish and subscribe (apis.py). docs/mqtt-brokers.md.
Devices never import this part: it hears devices' signals (receivers.py).
"""
