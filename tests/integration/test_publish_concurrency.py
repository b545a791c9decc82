"""Races on real PostgreSQL: concurrent publishes and edits never both win, numbers never skip.

Each thread has its own database connection (Django's are per thread) and waits at a barrier
with its connection open, so the transactions really overlap.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection

from controlplane.exceptions import ApplicationError, Conflict
from routing_policies.models import PolicyVersion
from routing_policies.selectors import version_table
from routing_policies.services import (
    policy_draft_create,
    policy_draft_update_cells,
    policy_version_publish,
)
from tests.factories import draft_changed

pytestmark = pytest.mark.integration

THREAD_TIMEOUT_S = 30


@dataclass
class Outcome:
    """What one racing thread got: a result, a refusal, or an unexpected error."""

    result: Any = None
    refusal: ApplicationError | None = None
    error: BaseException | None = None


def _race(threads: int, action: Callable[[int], Any]) -> list[Outcome]:
    """Run `action(i)` in `threads` threads released together; every connection is closed."""
    barrier = threading.Barrier(threads)
    outcomes = [Outcome() for _ in range(threads)]

    def run(index: int) -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=THREAD_TIMEOUT_S)
            outcomes[index].result = action(index)
        except ApplicationError as refusal:
            outcomes[index].refusal = refusal
        except BaseException as error:  # reported by the test, not swallowed
            outcomes[index].error = error
        finally:
            connection.close()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=THREAD_TIMEOUT_S)
    assert not any(worker.is_alive() for worker in workers), "a racing thread hung"
    errors = [o.error for o in outcomes if o.error is not None]
    assert errors == [], f"unexpected errors in racing threads: {errors!r}"
    return outcomes


def _published_numbers(fleet: Any) -> list[int]:
    return list(
        PolicyVersion.objects.filter(fleet=fleet, number__isnull=False)
        .order_by("number")
        .values_list("number", flat=True)
    )


def _winners_and_losers(outcomes: list[Outcome]) -> tuple[list[Any], list[ApplicationError]]:
    winners = [o.result for o in outcomes if o.refusal is None]
    losers = [o.refusal for o in outcomes if o.refusal is not None]
    return winners, losers


def test_policy_version_publish__two_publishers_same_revision_at_once__one_wins(
    requires_postgres: None, transactional_db: None, fleet: Any, publisher: Any
) -> None:
    # Given fleet-a at v1 with a draft at revision 2 (one θ changed)
    draft_changed(fleet=fleet, actor=publisher)

    # When two publishers publish revision 2 at the same moment
    outcomes = _race(
        2,
        lambda i: policy_version_publish(
            actor=publisher, fleet=fleet, revision=2, note=f"publisher {i}"
        ),
    )

    # Then exactly one gets v2, the other a 409 Conflict, and the numbers have no gap
    winners, losers = _winners_and_losers(outcomes)
    assert len(winners) == 1
    assert winners[0].number == 2
    assert len(losers) == 1
    assert isinstance(losers[0], Conflict)
    assert losers[0].status_code == 409
    assert _published_numbers(fleet) == [1, 2]
    assert not PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).exists()


def test_policy_version_publish__racing_rounds_after_new_drafts__versions_1_2_3(
    requires_postgres: None, transactional_db: None, fleet: Any, publisher: Any
) -> None:
    # Given fleet-a at v1
    for round_number in (2, 3):
        # When a new draft is made (one θ changed: revision 2) and three publishers race to
        # publish it
        draft_changed(fleet=fleet, actor=publisher)
        outcomes = _race(
            3,
            lambda i: policy_version_publish(actor=publisher, fleet=fleet, revision=2, note="race"),
        )

        # Then each round publishes exactly one version, the next number
        winners, losers = _winners_and_losers(outcomes)
        assert [w.number for w in winners] == [round_number]
        assert len(losers) == 2
        assert all(loser.status_code == 409 for loser in losers)

    # and the fleet's versions are 1, 2, 3: no duplicate, no gap
    assert _published_numbers(fleet) == [1, 2, 3]


def test_policy_draft_create__two_editors_at_once__one_draft(
    requires_postgres: None, transactional_db: None, fleet: Any, editor: Any
) -> None:
    # Given fleet-a at v1 without a draft
    # When two editors start a draft at the same moment
    outcomes = _race(2, lambda i: policy_draft_create(actor=editor, fleet=fleet))

    # Then one draft exists and the other editor is told so
    winners, losers = _winners_and_losers(outcomes)
    assert len(winners) == 1
    assert [loser.code for loser in losers] == ["draft_exists"]
    assert PolicyVersion.objects.filter(fleet=fleet, published_at__isnull=True).count() == 1


def test_policy_draft_update_cells__two_edits_of_same_revision_at_once__one_saved(
    requires_postgres: None, transactional_db: None, fleet: Any, editor: Any
) -> None:
    # Given a draft at revision 1, and two editors who loaded it
    draft = policy_draft_create(actor=editor, fleet=fleet)
    edits = [
        {
            "task_type": "voice",
            "latency_budget": "interactive",
            "privacy_tier": "normal",
            "values": {"threshold": 0.7},
        },
        {
            "task_type": "text",
            "latency_budget": "interactive",
            "privacy_tier": "normal",
            "values": {"threshold": 0.4},
        },
    ]

    # When both save a different cell with revision 1 at the same moment
    outcomes = _race(
        2,
        lambda i: policy_draft_update_cells(
            actor=editor, fleet=fleet, revision=1, edits=[edits[i]]
        ),
    )

    # Then exactly one edit is saved (revision 2); the other gets 409 stale_revision
    winners, losers = _winners_and_losers(outcomes)
    assert len(winners) == 1
    assert [(loser.status_code, loser.code) for loser in losers] == [(409, "stale_revision")]
    draft.refresh_from_db()
    assert draft.revision == 2
    table = version_table(version=draft)
    thresholds = (
        table[("voice", "interactive", "normal")]["threshold"],
        table[("text", "interactive", "normal")]["threshold"],
    )
    assert thresholds in [(0.7, 0.6), (0.65, 0.4)]
