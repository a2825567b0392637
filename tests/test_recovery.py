"""How a group restarts once the failure policy said it does (``recovery``): in place unless
something stands in the way, which the message names, else recreated; the message leads with
the policy's cause and says what the restart costs. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from ddp_operator.decide import failure_policy, recovery
from ddp_operator.decide.conditions import Conditions, condition
from ddp_operator.decide.failure_facts import WorkerFailure
from ddp_operator.decide.failure_policy import Counts
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def job(backoff: int = 2, strategy: str = "InPlace"):
    return resolve(ddpjob("j", "ns", nodes=4, backoffLimit=backoff, restartStrategy=strategy))


CRASH = WorkerFailure(1, "j-worker-1", "Error", exit_code=3)
GONE = WorkerFailure(1, "j-worker-1", "Deleted", gone=True, finished=False)


def verdict(j, failure: WorkerFailure = CRASH, counted: int = 0):
    return failure_policy.decide(j, [failure], Counts(counted=counted), "not elastic")


def test_a_failure_restarts_the_group_in_place_while_the_backoff_limit_allows() -> None:
    d = recovery.decide(job(), verdict(job(), counted=1), obstacle=None)
    assert d == recovery.Decision(
        recovery.IN_PLACE,
        "RestartingInPlace",
        "j-worker-1 exited with code 3 (Error); restarting all 4 workers in place "
        "(restart 2 of backoffLimit 2)",
    )


def test_what_stands_in_the_way_of_an_in_place_restart_is_named_and_the_group_recreated() -> None:
    d = recovery.decide(job(), verdict(job(), GONE), obstacle="worker 1 has no pod")
    assert d == recovery.Decision(
        recovery.RECREATE,
        "WorkerFailed",
        "j-worker-1 was deleted; restarting all 4 workers (restart 1 of backoffLimit 2; "
        "not in place: worker 1 has no pod)",
    )


def test_a_recreate_job_says_nothing_of_in_place() -> None:
    recreate = job(strategy="Recreate")
    d = recovery.decide(recreate, verdict(recreate, counted=1), "spec says Recreate")
    assert d.action == recovery.RECREATE
    assert d.message == (
        "j-worker-1 exited with code 3 (Error); restarting all 4 workers "
        "(restart 2 of backoffLimit 2)"
    )


def test_a_restart_sets_restarting_and_takes_created_and_running_back_with_one_event() -> None:
    conds = Conditions([], datetime(2026, 1, 1, tzinfo=UTC), 1)
    recovery.restarting(conds, recovery.decide(job(), verdict(job(), GONE), "no pod"))
    restarting = condition(conds.items, "Restarting")
    assert restarting["status"] == "True" and restarting["reason"] == "WorkerFailed"
    assert condition(conds.items, "Created")["status"] == "False"
    assert condition(conds.items, "Running")["reason"] == "Restarting"
    assert [(e.type, e.reason) for e in conds.events] == [("Warning", "WorkerFailed")]


def test_an_in_place_restart_keeps_created_and_takes_running_back() -> None:
    conds = Conditions([], datetime(2026, 1, 1, tzinfo=UTC), 1)
    conds.set("Created", True, "WorkersCreated", "created 4 workers (attempt 0)")
    recovery.restarting(conds, recovery.decide(job(), verdict(job()), None))
    assert condition(conds.items, "Restarting")["reason"] == "RestartingInPlace"
    assert condition(conds.items, "Created")["status"] == "True"
    assert condition(conds.items, "Running")["status"] == "False"
    assert [(e.type, e.reason) for e in conds.events][-1] == ("Warning", "RestartingInPlace")


def test_a_restart_like_the_last_one_is_announced_again() -> None:
    conds = Conditions([], datetime(2026, 1, 1, tzinfo=UTC), 1)
    first = recovery.decide(job(), verdict(job()), None)
    recovery.restarting(conds, first)
    second = recovery.decide(job(), verdict(job(), counted=1), None)
    recovery.restarting(conds, second)
    assert [(e.reason, e.message) for e in conds.events if e.type == "Warning"] == [
        ("RestartingInPlace", first.message),
        ("RestartingInPlace", second.message),
    ]
    assert condition(conds.items, "Restarting")["message"] == second.message
