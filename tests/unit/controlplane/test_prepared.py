"""controlplane.prepared: a read compiled once gives the ORM's own rows for every call's values,
and refuses what it cannot run faithfully."""

from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.db.models import Count
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from controlplane.prepared import Prepared
from routing_policies.models import PolicyVersion, Rollout
from routing_policies.mqtt.models import MqttFleetState
from routing_policies.selectors import fleet_assignment
from routing_policies.services import rollout_advance, rollout_rollback, rollout_start
from tests.factories import make_fleet

pytestmark = pytest.mark.django_db


def _versions(fleet_id: Any, number: Any = None) -> Any:
    rows = PolicyVersion.objects.filter(fleet_id=fleet_id, number__isnull=False)
    if number is not None:
        rows = rows.filter(number=number)
    return rows.order_by("-number").values("number", "dimensions", "fleet__slug", "published_at")


def test_rows_equal_the_orms_for_each_calls_values(
    fleet: Any, publish_version: Callable[..., Any]
) -> None:
    publish_version(fleet, threshold=0.7)
    other = make_fleet(slug="other")
    read = Prepared(_versions, "fleet_id")
    for fleet_id in (fleet.pk, other.pk, fleet.pk, 10**6):
        assert read.rows(fleet_id=fleet_id) == list(_versions(fleet_id))
    assert read.rows(fleet_id=fleet.pk)[0]["dimensions"] == fleet.versions.get(number=2).dimensions
    assert read.first(fleet_id=10**6) is None


def test_one_statement_run_with_each_calls_values(fleet: Any) -> None:
    read = Prepared(_versions, "fleet_id", "number")
    with CaptureQueriesContext(transaction.get_connection()) as queries:
        for _ in range(3):
            assert read.first(fleet_id=fleet.pk, number=1)["number"] == 1  # type: ignore[index]
            assert read.first(fleet_id=fleet.pk, number=9) is None
    assert len(queries) == 6  # one query per call
    # The same statement each time, with the call's values in it (the number 1, then 9).
    assert len({q["sql"] for q in queries}) == 2
    assert all(f"= {fleet.pk}" in q["sql"] for q in queries)


def test_a_locking_read_compiles_inside_the_callers_transaction(fleet: Any) -> None:
    read = Prepared(
        lambda fleet_id: (
            MqttFleetState.objects.select_for_update(of=("self",))
            .filter(fleet_id=fleet_id)
            .values("seq")
        ),
        "fleet_id",
    )
    MqttFleetState.objects.create(fleet=fleet, seq=4)
    with CaptureQueriesContext(transaction.get_connection()) as queries, transaction.atomic():
        assert read.rows(fleet_id=fleet.pk) == [{"seq": 4}]
    assert any("FOR UPDATE" in q["sql"] for q in queries)


@pytest.mark.django_db(transaction=True)
def test_a_locking_read_outside_a_transaction_is_refused_as_the_orm_refuses_it(
    fleet: Any,
) -> None:
    read = Prepared(
        lambda fleet_id: (
            MqttFleetState.objects.select_for_update().filter(fleet_id=fleet_id).values("seq")
        ),
        "fleet_id",
    )
    with pytest.raises(TransactionManagementError):
        read.rows(fleet_id=fleet.pk)
    with transaction.atomic():
        assert read.rows(fleet_id=fleet.pk) == []
    with pytest.raises(TransactionManagementError):  # compiled, still refused
        read.rows(fleet_id=fleet.pk)


def test_refuses_a_read_it_cannot_run_faithfully(fleet: Any) -> None:
    with pytest.raises(TypeError, match="values"):
        Prepared(lambda fleet_id: Rollout.objects.filter(fleet_id=fleet_id), "fleet_id").rows(
            fleet_id=fleet.pk
        )
    # A small-integer column: the marker is out of its range, the ORM would find nothing
    # without asking, so the argument never reaches the SQL.
    with pytest.raises(TypeError, match="stage"):
        Prepared(lambda stage: Rollout.objects.filter(stage=stage).values("id"), "stage").rows(
            stage=5
        )
    # An argument the queryset transforms before it reaches the SQL.
    with pytest.raises(TypeError, match="name"):
        Prepared(
            lambda name: PolicyVersion.objects.filter(note__icontains=name).values("id"), "name"
        ).rows(name="x")
    read = Prepared(
        lambda fleet_id: (
            PolicyVersion.objects.filter(fleet_id=fleet_id)
            .values("fleet_id")
            .annotate(n=Count("id"))
        ),
        "fleet_id",
    )
    with pytest.raises(TypeError, match="expected"):
        read.rows(fleet_id=fleet.pk, number=3)
    assert read.rows(fleet_id=fleet.pk) == [{"fleet_id": fleet.pk, "n": 1}]


def test_the_fleets_assignment_through_a_rollouts_life(
    fleet: Any, publish_version: Callable[..., Any]
) -> None:
    """fleet_assignment's compiled reads follow every transition as the models say."""
    publish_version(fleet, threshold=0.7)
    assert fleet_assignment(fleet.pk).stable == 1
    rollout = rollout_start(actor=None, fleet=fleet, version=2)
    started = fleet_assignment(fleet.pk)
    assert (started.stable, started.candidate, started.percent) == (1, 2, 5)
    assert (started.salt, started.rollout_id) == (rollout.salt, rollout.pk)
    rollout_advance(actor=None, fleet=fleet, to_stage=25)
    assert fleet_assignment(fleet.pk).percent == 25
    rollout_rollback(actor=None, fleet=fleet, reason="test", automatic=False)
    back = fleet_assignment(fleet.pk)
    assert (back.stable, back.candidate, back.rollout_id) == (1, None, None)
