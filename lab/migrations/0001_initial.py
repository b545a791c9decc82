"""The policy lab becomes its own app (issue 23): the Backtest model moves from the app label
`telemetry` to `lab` in Django's state only. Its table (`telemetry_backtest`), its rows and its
index stay where they are; telemetry's 0011 then forgets the model on its side. Permissions
follow the model (its content type is relabelled, when a database already has one)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_type_relabel(apps, schema_editor, old="telemetry", new="lab"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    if ContentType.objects.using(db).filter(app_label=new, model="backtest").exists():
        return
    ContentType.objects.using(db).filter(app_label=old, model="backtest").update(app_label=new)


def content_type_relabel_back(apps, schema_editor):
    content_type_relabel(apps, schema_editor, old="lab", new="telemetry")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        # The table was created by telemetry's 0006; the model's last change there is in 0006.
        ('telemetry', '0006_lab_event_inputs_and_backtests'),
        ('routing_policies', '0004_fleet_cloud_price'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Backtest',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('key', models.CharField(db_index=True, max_length=64)),
                        ('subject', models.CharField(max_length=7)),
                        ('version', models.PositiveIntegerField(null=True)),
                        ('revision', models.PositiveIntegerField()),
                        ('subject_table', models.JSONField()),
                        ('stable_version', models.PositiveIntegerField()),
                        ('start', models.DateTimeField()),
                        ('end', models.DateTimeField()),
                        ('filters', models.JSONField(default=dict)),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=8)),
                        ('events_total', models.BigIntegerField(default=0)),
                        ('events_done', models.BigIntegerField(default=0)),
                        ('result', models.JSONField(null=True)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(null=True)),
                        ('finished_at', models.DateTimeField(null=True)),
                        ('created_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('fleet', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='routing_policies.fleet')),
                        ('policy_version', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='routing_policies.policyversion')),
                    ],
                    options={
                        'db_table': 'telemetry_backtest',
                        'indexes': [models.Index(fields=['fleet', '-created_at'], name='backtest_fleet_time')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_relabel, content_type_relabel_back, elidable=True),
    ]
