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


def test_columns_keep_the_order_values_gave_them(
    fleet: Any, publish_version: Callable[..., Any]
) -> None:
    """An annotation named between fields (Django 5.2 selects in the order given): each value
    under its own key, as the ORM's."""
    publish_version(fleet, threshold=0.7)

    def build(fleet_id: Any) -> Any:
        return (
            PolicyVersion.objects.filter(fleet_id=fleet_id, number__isnull=False)
            .annotate(sibling_count=Count("fleet__versions"))
            .order_by("number")
            .values("number", "sibling_count", "fleet__slug", "published_at")
        )

    rows = Prepared(build, "fleet_id").rows(fleet_id=fleet.pk)
    assert rows == list(build(fleet.pk))
    assert [(r["number"], r["sibling_count"], r["fleet__slug"]) for r in rows] == [
        (1, 2, fleet.slug),
        (2, 2, fleet.slug),
    ]


def _prepared_statements() -> dict[str, str]:
    with transaction.get_connection().cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        return dict(cursor.fetchall())


def test_one_statement_planned_once_per_connection_and_run_with_each_calls_values(
    fleet: Any,
) -> None:
    read = Prepared(_versions, "fleet_id", "number")
    with CaptureQueriesContext(transaction.get_connection()) as queries:
        for _ in range(3):
            assert read.first(fleet_id=fleet.pk, number=1)["number"] == 1  # type: ignore[index]
            assert read.first(fleet_id=fleet.pk, number=9) is None
    assert len(queries) == 6  # one query per call: the PREPARE is the connection's setup
    sql = [q["sql"] for q in queries]
    # The connection's first run is the SQL itself, with the call's values in it; the second
    # prepares it, and every run from then on executes it with the call's values.
    assert sql[0].startswith("SELECT")
    assert f"= {fleet.pk}" in sql[0]
    name = sql[1].split()[1].split("(")[0]
    assert sql[1:] == [f"EXECUTE {name}({fleet.pk}, {n})" for n in (9, 1, 9, 1, 9)]
    statement = _prepared_statements()[name]
    assert ("$1" in statement, "$2" in statement, "%s" in statement) == (True, True, False)


@pytest.mark.django_db(transaction=True)
def test_a_statement_outlives_a_rollback_and_a_new_connection_prepares_its_own(
    fleet: Any,
) -> None:
    read = Prepared(_versions, "fleet_id")

    def prepare_then_fail() -> None:
        with transaction.atomic():  # prepared, then rolled back
            read.rows(fleet_id=fleet.pk)
            read.rows(fleet_id=fleet.pk)
            raise RuntimeError

    with pytest.raises(RuntimeError):
        prepare_then_fail()
    with CaptureQueriesContext(transaction.get_connection()) as queries:
        assert read.first(fleet_id=fleet.pk)["number"] == 1  # type: ignore[index]
    assert queries[0]["sql"].startswith("EXECUTE")  # still prepared: not again
    transaction.get_connection().close()  # a new connection has no statement
    for _ in range(3):
        assert read.first(fleet_id=fleet.pk)["number"] == 1  # type: ignore[index]
    assert len([n for n in _prepared_statements() if n.startswith("cp_")]) == 1


def test_reads_are_not_prepared_when_turned_off(fleet: Any, settings: Any) -> None:
    settings.DATABASE_PREPARED_READS = False
    read = Prepared(_versions, "fleet_id")
    with CaptureQueriesContext(transaction.get_connection()) as queries:
        for _ in range(3):
            assert read.first(fleet_id=fleet.pk)["number"] == 1  # type: ignore[index]
    assert all(q["sql"].startswith("SELECT") for q in queries)


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
    with CaptureQueriesContext(transaction.get_connection()) as queries:
        fleet_assignment(fleet.pk)  # with no open rollout, as with one: one read
    assert len(queries) == 1
