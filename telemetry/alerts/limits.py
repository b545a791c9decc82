"""The limits and patterns of an alert rule's fields, declared once.

The rule service checks them and the API schema shows them (`alerts.schemas`); the guards
share the evaluation window's and the sample count's bounds.
"""

from __future__ import annotations

from typing import Final

from controlplane.validators import TIDY_TEXT_PATTERN

# The service refuses what `text_problem` refuses; the schema shows it as this pattern.
RULE_NAME_PATTERN: Final = TIDY_TEXT_PATTERN
MAX_RULE_NAME_LENGTH: Final = 120
MAX_SCOPE_VALUE_LENGTH: Final = 120
MAX_THRESHOLD: Final = 1e9  # a threshold is within ±this
MAX_HYSTERESIS: Final = 1e9
MIN_WINDOW_MINUTES: Final = 1
MAX_WINDOW_MINUTES: Final = 360  # also the database's check, alert_rule_window_1_360
MAX_MIN_SAMPLES: Final = 10_000_000
MAX_FOR_SECONDS: Final = 86_400  # a day
