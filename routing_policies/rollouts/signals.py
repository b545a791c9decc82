"""What rollouts announce for the parts above them to act on, without rollouts importing them:
the push tier sends each change to the fleet's devices once the transaction commits
(`push/receivers.py`, connected in `RoutingPoliciesConfig.ready`). Both are sent inside the
transaction of the change and carry ids and numbers, never model objects."""

from django.dispatch import Signal

# What a fleet's devices must run changed: `fleet_id` (int), `assignment` (FleetAssignment).
assignment_changed = Signal()

# A fleet-wide θ nudge was set: `fleet_id` (int), `theta_offset` (float), `until` (a timestamp).
cloud_pressure_changed = Signal()
