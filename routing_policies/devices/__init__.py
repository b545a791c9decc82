"""Devices: enrolment and tokens, presence and acks, the registry page and the device API."""
