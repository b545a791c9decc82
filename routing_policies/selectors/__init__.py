"""The app's reads, for other apps, commands and tests; each lives in its part's `selectors`
(policies, rollouts, devices), where the app's own views call it."""

from ..broker_access.services import failure_counts as broker_access_failures
from ..devices.models import ONLINE_WINDOW, online_q
from ..devices.selectors import (
    candidate_cohort_count,
    device_list,
    device_query,
    device_rows,
    fleet_convergence,
    version_convergence,
)
from ..policies.sdk_cells import (
    sends_sensitive_data_off_device,
    shadow_refine_rates,
    table_cells,
)
from ..policies.selectors import (
    FleetState,
    FleetWithState,
    VersionRef,
    audit_list,
    cell_keys,
    draft_get,
    fleet_get,
    fleet_list,
    fleet_state_get,
    latest_published,
    published_numbers,
    version_diff,
    version_document,
    version_get,
    version_grid,
    version_table,
    versions_list,
)
from ..reviews.gate import fleet_freeze_open, review_settings_of
from ..reviews.rules import review_status
from ..rollouts.selectors import (
    cloud_pressure_live,
    compared_rollout,
    fleet_assignment,
    open_rollout,
    rollout_assignment,
    rollout_out,
    rollout_status,
)

__all__ = [
    "ONLINE_WINDOW",
    "FleetState",
    "FleetWithState",
    "VersionRef",
    "audit_list",
    "broker_access_failures",
    "candidate_cohort_count",
    "cell_keys",
    "cloud_pressure_live",
    "compared_rollout",
    "device_list",
    "device_query",
    "device_rows",
    "draft_get",
    "fleet_assignment",
    "fleet_convergence",
    "fleet_freeze_open",
    "fleet_get",
    "fleet_list",
    "fleet_state_get",
    "latest_published",
    "online_q",
    "open_rollout",
    "published_numbers",
    "review_settings_of",
    "review_status",
    "rollout_assignment",
    "rollout_out",
    "rollout_status",
    "sends_sensitive_data_off_device",
    "shadow_refine_rates",
    "table_cells",
    "version_convergence",
    "version_diff",
    "version_document",
    "version_get",
    "version_grid",
    "version_table",
    "versions_list",
]
