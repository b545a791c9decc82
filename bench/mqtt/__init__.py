"""MQTT device link benchmark: a stage change reaching N MQTT devices against a bare publish."""
