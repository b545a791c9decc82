"""The MQTT device link (docs/PROTOCOL.md, "MQTT"): fleet state published retained on a broker,
devices' acks, presence and telemetry read from it. Beside the push tier, independent of it."""
