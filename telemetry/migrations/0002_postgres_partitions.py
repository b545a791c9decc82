"""PostgreSQL only: raw events partitioned by day, a BRIN index for pruning the id ledger, and
lz4 compression of landed payloads. SQLite keeps the plain tables of 0001."""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import migrations

EVENT_TABLE_SQL = """
DROP TABLE telemetry_event;
CREATE TABLE telemetry_event (
    event_id uuid NOT NULL,
    fleet_id bigint NOT NULL,
    device_id varchar(128) NOT NULL,
    ts timestamp with time zone NOT NULL,
    received_at timestamp with time zone NOT NULL,
    policy_version integer NOT NULL,
    cohort varchar(9) NOT NULL,
    task_type varchar(32) NOT NULL,
    latency_budget varchar(32) NOT NULL,
    privacy_tier varchar(32) NOT NULL,
    route varchar(12) NOT NULL,
    decided_by varchar(12) NOT NULL,
    fallback varchar(16) NOT NULL,
    latency_ms double precision NOT NULL,
    cache_hit boolean NOT NULL,
    ok boolean NOT NULL,
    deidentified boolean NOT NULL,
    score double precision NULL,
    threshold double precision NULL,
    tokens integer NULL,
    intent_conf double precision NULL,
    lm_conf double precision NULL,
    upload_bytes bigint NULL,
    rtt_ms double precision NULL,
    bandwidth_kbps double precision NULL,
    device_load double precision NULL
) PARTITION BY RANGE (ts);
CREATE INDEX telemetry_event_fleet_ts ON telemetry_event (fleet_id, ts);
CREATE INDEX telemetry_eventkey_day_brin ON telemetry_eventkey USING brin (day);
DO $$ BEGIN
    ALTER TABLE telemetry_landedbatch ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN NULL;  -- a server built without lz4 keeps pglz
END $$;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(EVENT_TABLE_SQL)
    today = datetime.now(UTC).date()
    days = settings.TELEMETRY_RETENTION_DAYS
    for offset in range(-days - 1, 3):
        day = today + timedelta(days=offset)
        end = day + timedelta(days=1)
        schema_editor.execute(
            f"CREATE TABLE IF NOT EXISTS telemetry_event_p{day:%Y%m%d} PARTITION OF telemetry_event "
            f"FOR VALUES FROM ('{day.isoformat()} 00:00:00+00') TO ('{end.isoformat()} 00:00:00+00')"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # The partitioned table stays: reversing 0001 drops it (with its partitions) like any table.
    schema_editor.execute("DROP INDEX IF EXISTS telemetry_eventkey_day_brin")


class Migration(migrations.Migration):

    dependencies = [("telemetry", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
