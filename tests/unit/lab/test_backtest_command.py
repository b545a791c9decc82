"""`manage.py backtest` as an operator reads its refusals."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command


def test_manage_backtest__no_draft__one_clear_sentence_naming_the_field(fleet: Any) -> None:
    # Given a fleet with a published version and no draft
    # When the operator backtests the draft (the default subject)
    with pytest.raises(CommandError) as refused:
        call_command("backtest", fleet.slug)

    # Then the refusal names the field once, with the way out, and does not repeat itself
    message = str(refused.value)
    assert message.startswith("version: ")
    assert "has no draft" in message
    assert message.count("has no draft") == 1
