"""The calibration page: the curve per cell with the chosen θ, and applying it to the draft."""

from typing import Any

import pytest
from django.test import Client

from lab.backtests.models import Backtest
from routing_policies.models import AuditEntry, PolicyCell
from routing_policies.services import policy_draft_create
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db

PAGE = "/fleets/fleet-a/lab/calibrate/"
TEXT = {"task_type": "text", "latency_budget": "interactive", "privacy_tier": "normal"}


def _login(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_calibration_page__viewer_with_a_query__curve_data_and_chosen_theta(
    fleet: Any, viewer: Any
) -> None:
    response = _login(viewer).get(
        PAGE, {"kind": "alpha", "value": "70", "hours": "24", "cells": "text/interactive/normal"}
    )

    assert response.status_code == 200
    text = response.content.decode()
    assert "Fitting the score weights (length, intent, LM) is not done yet" in text
    assert 'id="calibration-charts"' in text
    assert 'data-cell="text/interactive/normal"' in text
    assert "needs the editor role" in text
    assert "vendor/plotly.min.js" in text


def test_calibration_page__share_out_of_range__400_saying_so(fleet: Any, viewer: Any) -> None:
    response = _login(viewer).get(PAGE, {"kind": "alpha", "value": "170", "hours": "24"})
    assert response.status_code == 400
    assert "between 0 and 100%" in response.content.decode()


def test_calibration_page__editor_applies__draft_updated_and_audited(
    fleet: Any, editor: Any
) -> None:
    draft = policy_draft_create(actor=editor, fleet=fleet)
    client = _login(editor)

    response = client.post(
        f"{PAGE}apply/",
        {"revision": str(draft.revision), "theta": ["text/interactive/normal=0.55"]},
    )

    # Then the draft holds it, audited, and the page goes to the backtest of revision 2
    assert response.status_code == 302
    backtest = Backtest.objects.get()
    assert response["Location"] == f"/fleets/fleet-a/lab/backtests/?id={backtest.pk}"
    assert (backtest.subject, backtest.revision) == ("draft", 2)
    assert PolicyCell.objects.get(version=draft, **TEXT).threshold == 0.55
    assert AuditEntry.objects.filter(action="policy_cells.updated").count() == 1


def test_calibration_page__stale_revision__409_draft_unchanged(fleet: Any, editor: Any) -> None:
    draft = policy_draft_create(actor=editor, fleet=fleet)
    client = _login(editor)
    client.post(f"{PAGE}apply/", {"revision": "1", "theta": ["text/interactive/normal=0.5"]})

    response = client.post(
        f"{PAGE}apply/", {"revision": "1", "theta": ["text/interactive/normal=0.7"]}
    )

    assert response.status_code == 409
    assert "The draft was not changed." in response.content.decode()
    assert PolicyCell.objects.get(version=draft, **TEXT).threshold == 0.5


def test_calibration_page__viewer_applies__403(fleet: Any, viewer: Any) -> None:
    policy_draft_create(actor=None, fleet=fleet)
    response = _login(viewer).post(
        f"{PAGE}apply/", {"revision": "1", "theta": ["text/interactive/normal=0.5"]}
    )
    assert response.status_code == 403
    assert PolicyCell.objects.filter(threshold=0.5).count() == 0
