"""What a failure means for a job (``recovery``): a group restart as a new attempt while the
backoff limit allows (in place unless something stands in the way, which the message names),
then failing the job; the messages name the first failures and count the rest. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from ddp_operator.decide import recovery
from ddp_operator.decide.conditions import Conditions, condition
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def job(backoff: int = 2):
    return resolve(ddpjob("j", "ns", nodes=4, backoffLimit=backoff, restartStrategy="InPlace"))


def test_a_failure_restarts_the_group_in_place_while_the_backoff_limit_allows() -> None:
    d = recovery.decide(job(), ["j-worker-1 exited with code 3"], attempt=1, obstacle=None)
    assert d == recovery.Decision(
        recovery.IN_PLACE,
        "RestartingInPlace",
        "j-worker-1 exited with code 3; restarting all 4 workers in place (restart 2 of 2)",
    )


def test_what_stands_in_the_way_of_an_in_place_restart_is_named_and_the_group_recreated() -> None:
    d = recovery.decide(job(), ["j-worker-1 was deleted"], 0, obstacle="worker 1 has no pod")
    assert d == recovery.Decision(
        recovery.RECREATE,
        "WorkerFailed",
        "j-worker-1 was deleted; restarting all 4 workers (restart 1 of 2; "
        "not in place: worker 1 has no pod)",
    )


def test_a_recreate_job_says_nothing_of_in_place() -> None:
    recreate = resolve(ddpjob("j", "ns", nodes=4, backoffLimit=2, restartStrategy="Recreate"))
    d = recovery.decide(recreate, ["j-worker-1 exited with code 3"], 1, "spec says Recreate")
    assert d.action == recovery.RECREATE
    assert d.message == "j-worker-1 exited with code 3; restarting all 4 workers (restart 2 of 2)"


def test_past_the_backoff_limit_the_job_fails_naming_three_and_counting_the_rest() -> None:
    failures = [f"j-worker-{i} was deleted" for i in range(4)]
    d = recovery.decide(job(backoff=1), failures, attempt=1, obstacle=None)
    assert d.action == recovery.FAIL and d.reason == "BackoffLimitExceeded"
    assert d.message == (
        "j-worker-0 was deleted; j-worker-1 was deleted; j-worker-2 was deleted (and 1 more); "
        "the group was restarted 1 times (backoffLimit 1)"
    )
    assert recovery.decide(job(backoff=0), failures[:1], 0, None).action == recovery.FAIL


def test_a_restart_sets_restarting_and_takes_created_and_running_back_with_one_event() -> None:
    conds = Conditions([], datetime(2026, 1, 1, tzinfo=UTC), 1)
    failed = recovery.decide(job(), ["j-worker-0 was deleted"], 0, "worker 0 has no pod")
    recovery.restarting(conds, failed)
    restarting = condition(conds.items, "Restarting")
    assert restarting["status"] == "True" and restarting["reason"] == "WorkerFailed"
    assert condition(conds.items, "Created")["status"] == "False"
    assert condition(conds.items, "Running")["reason"] == "Restarting"
    assert [(e.type, e.reason) for e in conds.events] == [("Warning", "WorkerFailed")]


def test_an_in_place_restart_keeps_created_and_takes_running_back() -> None:
    conds = Conditions([], datetime(2026, 1, 1, tzinfo=UTC), 1)
    conds.set("Created", True, "WorkersCreated", "created 4 workers (attempt 0)")
    recovery.restarting(conds, recovery.decide(job(), ["j-worker-0 exited with code 1"], 0, None))
    assert condition(conds.items, "Restarting")["reason"] == "RestartingInPlace"
    assert condition(conds.items, "Created")["status"] == "True"
    assert condition(conds.items, "Running")["status"] == "False"
    assert [(e.type, e.reason) for e in conds.events][-1] == ("Warning", "RestartingInPlace")
