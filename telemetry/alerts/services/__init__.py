"""Writes of alerts: rules, webhooks, rollout guards, evaluation, webhook delivery, seeding."""

from ..selectors import RULE_FIELDS
from .delivery import enqueue_delivery, webhook_deliveries_overdue, webhook_delivery_attempt
from .evaluation import Evaluation, alerts_evaluate
from .guards import (
    DEFAULT_GUARDS,
    MAX_GUARDS,
    guard_input_defaults,
    rollout_guards_set,
    rollout_start_guarded,
)
from .rules import (
    MAX_RULES_PER_FLEET,
    RULE_INVALID,
    alert_rule_create,
    alert_rule_delete,
    alert_rule_update,
)
from .seeding import SEED_RULES, alert_rules_seed
from .webhooks import (
    MAX_WEBHOOKS_PER_FLEET,
    WEBHOOK_INVALID,
    alert_webhook_create,
    alert_webhook_delete,
)

__all__ = [
    "DEFAULT_GUARDS",
    "MAX_GUARDS",
    "MAX_RULES_PER_FLEET",
    "MAX_WEBHOOKS_PER_FLEET",
    "RULE_FIELDS",
    "RULE_INVALID",
    "SEED_RULES",
    "WEBHOOK_INVALID",
    "Evaluation",
    "alert_rule_create",
    "alert_rule_delete",
    "alert_rule_update",
    "alert_rules_seed",
    "alert_webhook_create",
    "alert_webhook_delete",
    "alerts_evaluate",
    "enqueue_delivery",
    "guard_input_defaults",
    "rollout_guards_set",
    "rollout_start_guarded",
    "webhook_deliveries_overdue",
    "webhook_delivery_attempt",
]
