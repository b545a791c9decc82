"""Each part plugs into the parts below it, which never import it (pyproject.toml's
import-linter layers): connected once the models are loaded, by `RoutingPoliciesConfig.ready()`.
Into policies' writes and pages (policies/signals.py): reviews and rollouts; into rollouts
(rollouts/hooks.py): governance's gate and the devices' convergence; into segments
(segments/hooks.py): the devices' attribute census; into policies, segments' rules (a
version's overrides name segments, policies/signals.py); the push tier hears what
rollouts and devices announce (rollouts/signals.py, devices/signals.py), broker access what
devices announce (a device enrolled, a token revoked), and so does the MQTT link when
MQTT_URL is set (mqtt/receivers.py)."""

from django.conf import settings

from .broker_access import receivers as broker_access
from .devices.selectors import attribute_census, fleet_convergence
from .mqtt import receivers as mqtt
from .policies.signals import segment_rules_register
from .push import receivers as push
from .reviews import receivers as reviews
from .reviews import rollout_gate
from .rollouts import receivers as rollouts
from .rollouts.hooks import convergence_reader_register
from .segments.hooks import attribute_census_register
from .segments.selectors import segment_rules


def connect() -> None:
    """Connect every part's receivers (idempotent: each has a dispatch_uid, a registration
    replaces the last)."""
    if settings.MQTT_URL:
        # First: a fleet's first version is retained before the state that rollouts announces.
        mqtt.connect()
    reviews.connect()
    rollouts.connect()
    rollout_gate.register()
    convergence_reader_register(fleet_convergence)
    attribute_census_register(attribute_census)
    segment_rules_register(lambda fleet: segment_rules(fleet=fleet))
    push.connect()
    broker_access.connect()
