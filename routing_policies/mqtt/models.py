"""What the MQTT link last published for each fleet (the sequence number of its retained state),
and the newest presence it applied for each device."""

from django.db import models

from ..devices.models import Device
from ..policies.models import Fleet


class MqttFleetState(models.Model):
    """A fleet's retained MQTT state as last published: its `seq` (strictly increasing: a new
    state takes the next number, under this row's lock), the state itself, and whether the
    broker acknowledged it; likewise the cloud-pressure nudge. A reconcile republishes what the
    broker did not acknowledge (mqtt.publish)."""

    fleet = models.OneToOneField(
        Fleet, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    seq = models.PositiveBigIntegerField(default=0)
    # The state payload of `seq` without its `seq` (compared to decide whether a state is new).
    state = models.JSONField(null=True, blank=True)
    state_published = models.BooleanField(default=False)
    # `{"theta_offset", "until"}` of the nudge last published (null: none, or cleared).
    pressure = models.JSONField(null=True, blank=True)
    pressure_published = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"mqtt state of {self.fleet_id} (seq {self.seq})"


class MqttPresence(models.Model):
    """The newest presence the link applied for a device on MQTT: its connection's `session`
    (docs/PROTOCOL.md, "MQTT": it grows with each connection; a birth and the will of one
    connection share it) and whether it said online. Several links read presence on shared
    subscriptions, so a will and a newer birth may land in either order: a presence is applied
    only when it is newer than this one (mqtt.consume)."""

    device = models.OneToOneField(
        Device, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    session = models.PositiveBigIntegerField(default=0)
    online = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"mqtt presence of {self.device_id} (session {self.session})"
