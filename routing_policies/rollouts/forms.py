"""The guard fields of the rollout page's start form (docs/alerts.md): the guard extension's
input, read only when "guard this rollout" is ticked, through the extension's own input
serializer (the one its API runs and the schema shows). The version and the holdback go through
the API's own input serializer: `schemas.RolloutStartBaseSerializer`."""

from typing import Any

from django.http import QueryDict

from controlplane.pages import form_input

from ..extensions import rollout_guards


def guard_options(data: QueryDict) -> dict[str, Any]:
    """The guard options of a start form: none unless "guard this rollout" is ticked (without
    a guard extension, the preset asked for, which the start refuses)."""
    if data.get("guarded") != "on":
        return {}
    guards = rollout_guards()
    if guards is None:
        return {"guards": data.get("guards") or "default"}
    return form_input(guards.start_fields, data)
