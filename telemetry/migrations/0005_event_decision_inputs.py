"""Events may carry the decision's remaining inputs (PROTOCOL.md extensions): whether the
device was online, its cloud-inference estimate and the cloud-pressure offset in force, so a
backtest replays the decision exactly (docs/lab.md)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0004_event_uploaded_rule_hysteresis")]

    operations = [
        migrations.AddField(
            model_name="event", name="online", field=models.BooleanField(null=True)
        ),
        migrations.AddField(
            model_name="event", name="cloud_infer_ms", field=models.FloatField(null=True)
        ),
        migrations.AddField(
            model_name="event", name="cloud_pressure", field=models.FloatField(null=True)
        ),
    ]
