"""Input of the rollout page's forms: each action's numbers as typed, refused with the field's
name when they are not numbers (the services check ranges and states)."""

from typing import Any

from django.http import QueryDict

from controlplane.pages import NumberField, PageForm, WholeNumberField


class RolloutStartForm(PageForm):
    """Start a rollout of a published version, guarded when "guard this rollout" is ticked."""

    version = WholeNumberField(label="The version to roll out")
    holdback = WholeNumberField(label="The holdback", empty=0, minimum=0)


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


class RolloutAdvanceForm(PageForm):
    """Advance to the stage the button names."""

    to_stage = WholeNumberField(label="The stage to advance to")


class FleetSwitchForm(PageForm):
    """Switch the whole fleet to a published version."""

    version = WholeNumberField(label="The version to switch to")


class CloudPressureForm(PageForm):
    """A fleet-wide θ nudge for a while."""

    theta_offset = NumberField(label="The θ offset")
    ttl_s = WholeNumberField(label="The duration in seconds")
