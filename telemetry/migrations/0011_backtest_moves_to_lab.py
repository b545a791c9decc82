"""The Backtest model now belongs to the app `lab` (lab/migrations/0001_initial.py): telemetry
forgets it in Django's state only; its table `telemetry_backtest` and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0010_guard_decide_estimate'),
        ('lab', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='Backtest',
                ),
            ],
            database_operations=[],
        ),
    ]
