"""The limits of an alert rule's and a rollout guard set's fields, declared once.

The input serializers (`alerts.schemas`) check them, for the API and the alerts page
alike, and the schema shows them; the guards share the window's and the sample count's bounds.
"""

from __future__ import annotations

from typing import Final

# A rule's name is tidy text as well (controlplane.validators.TIDY_TEXT_PATTERN).
MAX_RULE_NAME_LENGTH: Final = 120
MAX_SCOPE_VALUE_LENGTH: Final = 120
MAX_THRESHOLD: Final = 1e9  # a threshold is within ±this
MAX_HYSTERESIS: Final = 1e9
MIN_WINDOW_MINUTES: Final = 1
MAX_WINDOW_MINUTES: Final = 360  # also the database's check, alert_rule_window_1_360
MAX_MIN_SAMPLES: Final = 10_000_000
MAX_FOR_SECONDS: Final = 86_400  # a day
MAX_WEBHOOK_URL_LENGTH: Final = 500  # also the column's

# Rollout guards (docs/alerts.md): the guard set's input serializer (`alerts.schemas`) and the
# guards' own checks (`alerts.services.guards.input`) read these.
MAX_GUARDS: Final = 12
MIN_CONFIDENCE: Final = 0.5
MAX_CONFIDENCE: Final = 0.999
DEFAULT_BAKE_MINUTES: Final = 10
MAX_BAKE_MINUTES: Final = 7 * 24 * 60  # a week at one stage
MAX_EXPOSURE: Final = 10**9
MAX_EXTENSIONS: Final = 5
