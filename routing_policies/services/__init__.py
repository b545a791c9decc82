"""The app's writes, for other apps, commands and tests; each lives in its part's `services`
(policies, rollouts, devices), where the app's own views call it."""

from ..devices.selectors import device_authenticate
from ..devices.services import (
    device_ack,
    device_enroll,
    device_revoke,
    device_seen,
    devices_ack,
    devices_seen,
    devices_seen_by_token,
    fleet_enrollment_key_rotate,
)
from ..devices.tokens import DEVICE_TOKEN_PREFIX, FLEET_KEY_PREFIX, hash_secret
from ..policies.audit import Actor, actor_user, audit_of, audit_record
from ..policies.services import (
    default_table,
    fleet_cloud_price_set,
    fleet_create,
    policy_draft_add_dimension_value,
    policy_draft_create,
    policy_draft_discard,
    policy_draft_import,
    policy_draft_override_remove,
    policy_draft_override_set,
    policy_draft_remove_dimension_value,
    policy_draft_update_cells,
    policy_version_publish,
)
from ..push.token_cache import device_authenticate_cached
from ..reviews.notify import review_notifier_register
from ..reviews.services import change_request_open, change_request_publish
from ..rollouts.services import (
    cloud_pressure_set,
    fleet_switch_version,
    rollout_advance,
    rollout_complete,
    rollout_pause,
    rollout_resume,
    rollout_rollback,
    rollout_start,
)
from ..schedules.services import scheduled_changes_run_due

__all__ = [
    "DEVICE_TOKEN_PREFIX",
    "FLEET_KEY_PREFIX",
    "Actor",
    "actor_user",
    "audit_of",
    "audit_record",
    "change_request_open",
    "change_request_publish",
    "cloud_pressure_set",
    "default_table",
    "device_ack",
    "device_authenticate",
    "device_authenticate_cached",
    "device_enroll",
    "device_revoke",
    "device_seen",
    "devices_ack",
    "devices_seen",
    "devices_seen_by_token",
    "fleet_cloud_price_set",
    "fleet_create",
    "fleet_enrollment_key_rotate",
    "fleet_switch_version",
    "hash_secret",
    "policy_draft_add_dimension_value",
    "policy_draft_create",
    "policy_draft_discard",
    "policy_draft_import",
    "policy_draft_override_remove",
    "policy_draft_override_set",
    "policy_draft_remove_dimension_value",
    "policy_draft_update_cells",
    "policy_version_publish",
    "review_notifier_register",
    "rollout_advance",
    "rollout_complete",
    "rollout_pause",
    "rollout_resume",
    "rollout_rollback",
    "rollout_start",
    "scheduled_changes_run_due",
]
