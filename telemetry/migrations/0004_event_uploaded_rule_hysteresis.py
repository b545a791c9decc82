"""Events say whether the task's data left the device (`uploaded`, PROTOCOL.md extensions);
alert rules get a hysteresis. The seeded rules of existing fleets get the seed's hysteresis
when they are still as seeded (same name, metric, condition and threshold)."""

from django.db import migrations, models

# (name, metric, condition, threshold) → hysteresis, as telemetry.services.alerts.SEED_RULES.
SEEDED = {
    ("Cloud share jump", "cloud_share", "rises_by", 0.2): 0.05,
    ("Device share α drop", "alpha", "falls_by", 0.15): 0.05,
    ("Fallback rate above 5%", "fallback_rate", "above", 0.05): 0.01,
    ("Error rate above 2%", "error_rate", "above", 0.02): 0.005,
    ("P95 over a cell's budget", "p95_budget", "above", 1.0): 0.1,
}


def seeded_hysteresis(apps, schema_editor):
    rule_model = apps.get_model("telemetry", "AlertRule")
    for (name, metric, condition, threshold), hysteresis in SEEDED.items():
        rule_model.objects.filter(
            name=name, metric=metric, condition=condition, threshold=threshold, hysteresis=0
        ).update(hysteresis=hysteresis)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0003_alerts_and_guards")]

    operations = [
        migrations.AddField(
            model_name="alertrule",
            name="hysteresis",
            field=models.FloatField(default=0.0),
        ),
        migrations.AddField(
            model_name="event",
            name="uploaded",
            field=models.BooleanField(null=True),
        ),
        migrations.RunPython(seeded_hysteresis, migrations.RunPython.noop),
    ]
