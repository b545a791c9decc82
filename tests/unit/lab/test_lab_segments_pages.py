"""The backtest and calibration pages with a segment: the picker offers the fleet's segments,
the result says which segment, the calibrate page writes θs into the segment's override."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from lab.backtests.models import Backtest
from lab.backtests.services import backtest_run
from routing_policies.policies.sdk_cells import table_cells
from routing_policies.selectors import version_table
from routing_policies.services import policy_draft_create, policy_draft_override_set
from telemetry.models import Event
from tests.factories import decided_events
from tests.lab_events import (
    NPU_PHONES,
    PHONES,
    ingest,
    on_phones,
    phones_with_segments,
    refined_events,
)

pytestmark = pytest.mark.django_db

BACKTESTS = "/fleets/fleet-a/lab/backtests/"
CALIBRATE = "/fleets/fleet-a/lab/calibrate/"


@pytest.fixture
def recorded(fleet: Any, fleet_key: str, publisher: Any) -> Any:
    phones_with_segments(fleet=fleet, fleet_key=fleet_key, actor=publisher)
    v1 = table_cells(version_table(version=fleet.versions.get(number=1)))
    on_phones(decided_events(fleet, v1, count=600, store=False), PHONES)
    return fleet


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_backtests_page__segment_picked__result_names_it_and_its_override(
    recorded: Any, publisher: Any
) -> None:
    # Given a draft whose override for npu sets text/background/normal's θ
    draft = policy_draft_create(actor=publisher, fleet=recorded)
    policy_draft_override_set(
        actor=publisher,
        fleet=recorded,
        revision=draft.revision,
        segment="npu",
        cells={"text/background/normal": {"threshold": 0.9}},
    )
    client = _client(publisher)

    # When the page offers the segments and a backtest of the draft is run for npu
    form = client.get(BACKTESTS).content.decode()
    response = client.post(
        f"{BACKTESTS}start/", {"version": "draft", "hours": "24", "segment": "npu"}
    )
    backtest = Backtest.objects.get()
    backtest_run(backtest_id=backtest.pk)
    page = client.get(response["Location"]).content.decode()

    # Then the picker had every segment and the whole fleet; the result names the segment,
    # its devices and the cell its override changes, and the list marks it
    assert 'name="segment"' in form
    for name in ("the whole fleet", "npu", "gpu-or-npu", "cars"):
        assert name in form
    assert 'data-field="segment">segment npu' in page
    assert "devices in segment <strong>npu</strong> (5 devices now)" in page
    assert "its override changes text/background/normal" in page
    assert "segment npu</span>" in page


def test_backtests_page__unknown_segment__400_on_the_page_nothing_started(
    recorded: Any, editor: Any
) -> None:
    response = _client(editor).post(f"{BACKTESTS}start/", {"version": "1", "segment": "nope"})

    assert response.status_code == 400
    assert "no segment &#x27;nope&#x27;" in response.content.decode()
    assert not Backtest.objects.exists()


def test_calibrate_page__segment__summary_names_it_and_apply_writes_its_override(
    recorded: Any, editor: Any
) -> None:
    # Given an open draft
    draft = policy_draft_create(actor=editor, fleet=recorded)
    client = _client(editor)

    # When the text/background/normal cell is calibrated for segment npu
    page = client.get(
        CALIBRATE,
        {
            "kind": "alpha",
            "value": "50",
            "hours": "24",
            "cells": "text/background/normal",
            "segment": "npu",
        },
    ).content.decode()

    # Then the summary names the segment and the apply form writes into its override
    assert 'data-field="segment">npu</strong>' in page
    assert '<input type="hidden" name="segment" value="npu">' in page
    assert "Write the ticked θs into the draft's override for npu" in page

    # And applying a θ puts it in the override, not in the cell, and backtests the segment
    response = client.post(
        f"{CALIBRATE}apply/",
        {
            "revision": str(draft.revision),
            "theta": ["text/background/normal=0.55"],
            "segment": "npu",
        },
    )
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.overrides[0]["cells"] == {"text/background/normal": {"threshold": 0.55}}
    assert Backtest.objects.get().filters["segment"]["name"] == "npu"


def test_calibrate_page__segment_quality_target__its_reports_or_the_reason(
    fleet: Any, fleet_key: str, publisher: Any, viewer: Any
) -> None:
    # Given draft reports of the image cell from every phone but the NPU ones
    phones_with_segments(fleet=fleet, fleet_key=fleet_key, actor=publisher)
    ingest(fleet, refined_events(1200, devices=set(PHONES) - NPU_PHONES))
    client = _client(viewer)
    query = {"kind": "quality", "value": "60", "hours": "24", "cells": "image/interactive/normal"}

    # When the cell is calibrated for device quality on segment gpu-or-npu, and on npu
    page = client.get(CALIBRATE, {**query, "segment": "gpu-or-npu"})
    refused = client.get(CALIBRATE, {**query, "segment": "npu"})

    # Then the GPU phones' reports answer, the page saying whose reports they are; npu,
    # without any, is refused with the reason, as the fleet is
    assert page.status_code == 200
    html = page.content.decode()
    assert "Score → draft kept" in html
    assert 'data-field="chosen-quality"' in html
    assert "predicted from the segment's own draft reports" in html
    assert refused.status_code == 409
    assert "Too few draft reports" in refused.content.decode()


def test_manage_backtest__segment__its_events_only_and_named(recorded: Any) -> None:
    out = StringIO()

    call_command("backtest", "fleet-a", "--subject", "1", "--segment", "npu", stdout=out)

    text = out.getvalue()
    npu_events = Event.objects.filter(device_id__in=NPU_PHONES).count()
    assert f"v1 over 24 h, {npu_events} events, against v1, segment npu" in text
    assert "reproduces 100.00%" in text


def test_manage_backtest__unknown_segment__error_names_segment(recorded: Any) -> None:
    with pytest.raises(CommandError, match="segment: no segment 'nope' in this fleet"):
        call_command("backtest", "fleet-a", "--subject", "1", "--segment", "nope")
    assert not Backtest.objects.exists()
