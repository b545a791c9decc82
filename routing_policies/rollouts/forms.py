"""The guard fields of the rollout page's start form (docs/alerts.md): the guard extension's
input, read only when "guard this rollout" is ticked. (The version and the holdback go through
the API's own input serializer: `schemas.RolloutStartBaseSerializer`.)"""

from typing import Any

from django.http import QueryDict

from controlplane.pages import PageForm, WholeNumberField


class GuardOptionsForm(PageForm):
    """The start form's guard fields (docs/alerts.md), read only when guarded."""

    bake_minutes = WholeNumberField(label="The bake time")
    guard_window_minutes = WholeNumberField(label="The guard window")
    guard_min_samples = WholeNumberField(label="The minimum events")


def guard_options(data: QueryDict) -> dict[str, Any]:
    """The guard options of a start form: none unless "guard this rollout" is ticked."""
    if data.get("guarded") != "on":
        return {}
    values = GuardOptionsForm(data).values()
    return {
        # "default" (fixed limits), "statistical" or "quality"; the guard service refuses
        # anything else.
        "guards": data.get("guard_preset") or "default",
        "bake_minutes": values["bake_minutes"],
        "auto_advance": data.get("auto_advance") == "on",
        "window_minutes": values["guard_window_minutes"],
        "min_samples": values["guard_min_samples"],
    }
