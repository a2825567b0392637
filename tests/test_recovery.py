"""What a failure means for a job (``recovery``): a group restart as a new attempt while the
backoff limit allows, then failing the job; the messages name the first failures and count the
rest. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from ddp_operator import recovery
from ddp_operator.conditions import Conditions, condition
from ddp_operator.jobspec import resolve

from jobs import ddpjob


def job(backoff: int = 2):
    return resolve(ddpjob("j", "ns", nodes=4, backoffLimit=backoff))


def test_a_failure_restarts_the_group_while_the_backoff_limit_allows() -> None:
    d = recovery.decide(job(), ["j-worker-1 exited with code 3"], attempt=1)
    assert d == recovery.Decision(
        recovery.RECREATE,
        "WorkerFailed",
        "j-worker-1 exited with code 3; restarting all 4 workers (restart 2 of 2)",
    )


def test_past_the_backoff_limit_the_job_fails_naming_three_and_counting_the_rest() -> None:
    failures = [f"j-worker-{i} was deleted" for i in range(4)]
    d = recovery.decide(job(backoff=1), failures, attempt=1)
    assert d.action == recovery.FAIL and d.reason == "BackoffLimitExceeded"
    assert d.message == (
        "j-worker-0 was deleted; j-worker-1 was deleted; j-worker-2 was deleted (and 1 more); "
        "the group was restarted 1 times (backoffLimit 1)"
    )
    assert recovery.decide(job(backoff=0), failures[:1], attempt=0).action == recovery.FAIL


def test_a_restart_sets_restarting_and_takes_created_and_running_back_with_one_event() -> None:
    conds = Conditions([], datetime(2026, 1, 1, tzinfo=UTC), 1)
    recovery.restarting(conds, recovery.decide(job(), ["j-worker-0 was deleted"], attempt=0))
    restarting = condition(conds.items, "Restarting")
    assert restarting["status"] == "True" and restarting["reason"] == "WorkerFailed"
    assert condition(conds.items, "Created")["status"] == "False"
    assert condition(conds.items, "Running")["reason"] == "Restarting"
    assert [(e.type, e.reason) for e in conds.events] == [("Warning", "WorkerFailed")]
