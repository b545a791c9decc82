"""Model fields the telemetry parts' bulk tables share (ingest's events, feedback, rollups)."""

from django.db import models

from routing_policies.models import Fleet


def bulk_fleet_fk() -> "models.ForeignKey[Fleet, Fleet]":
    """A fleet reference on a bulk table: no per-row constraint check, no Python cascade.

    Deleting a fleet must not make Django load millions of telemetry rows to cascade them;
    retention removes them instead. The (fleet, time) indexes below serve every query.
    """
    return models.ForeignKey(
        Fleet, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
