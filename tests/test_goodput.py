"""What each ended attempt cost (``goodput``): steps lost against the checkpoint, whether it
advanced, and the bound on restarts in a row without progress (``NoProgress``). Pure: a status,
the attempt's last report and a verdict in; the account and maybe another verdict out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ddp_operator.decide import failure_policy, goodput
from ddp_operator.decide.failure_facts import WorkerFailure
from ddp_operator.decide.failure_policy import Bound, Counts
from ddp_operator.model import failure_policy as fp
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob

T0 = "2026-01-01T00:00:00Z"
NOW = datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC)  # the failure is decided 4 s after T0
NONE = Counts()


def job(**policy: Any):
    return resolve(ddpjob("j", "ns", nodes=2, backoffLimit=20, failurePolicy=policy))


def crash(disruption: bool = False) -> WorkerFailure:
    reason = "EvictionByEvictionAPI" if disruption else "Error"
    return WorkerFailure(1, "j-worker-1", reason, exit_code=3, time=T0, disruption=disruption)


def verdict(j, counts: Counts = NONE, disruption: bool = False):
    return failure_policy.decide(j, [crash(disruption)], counts, alone="not elastic")


def run(j, attempts: list[tuple[int | None, dict | None]]) -> tuple[dict, Any]:
    """Each attempt in turn: (its last reported step or None, the checkpoint after it); the
    status as the plan leaves it and the last verdict."""
    status: dict[str, Any] = {}
    v = None
    for attempt, (step, mark) in enumerate(attempts):
        if mark is not None:
            status["checkpoint"] = {**mark, "attempt": mark.get("attempt", attempt)}
        report = {"step": step, "attempt": attempt} if step is not None else None
        v = verdict(j, failure_policy.Counts.of(status))
        ended = goodput.account(status, report, attempt, v, NOW)
        v = goodput.bound(j, v, ended)
        new = {**status}
        failure_policy.record(new, v, attempt, in_place=False)
        goodput.record(new, ended)
        status = new
        if v.action == fp.FAIL_JOB:
            break
    return status, v


def test_a_failure_costs_the_steps_since_the_checkpoint() -> None:
    status, v = run(job(), [(17, {"step": 10, "path": "/ckpt/10"})])
    assert v.action == fp.RESTART_GROUP
    first = status["firstFailure"]
    assert (first["lastStep"], first["resumeStep"], first["stepsLost"]) == (17, 10, 7)
    assert status["goodput"] == {
        "attempt": 0,
        "failures": 1,
        "stepsLost": 7,
        "highestStep": 17,
        "highestCheckpoint": 10,
        "restartsWithoutProgress": 0,
        "diedAt": [],
    }


def test_without_a_checkpoint_every_step_is_lost() -> None:
    status, _ = run(job(), [(40, None), (55, None)])
    assert status["goodput"]["stepsLost"] == 95
    assert status["firstFailure"]["resumeStep"] == 0


def test_the_same_failure_at_the_same_step_stops_after_the_bound() -> None:
    ckpt = {"step": 10, "attempt": 0}
    attempts = [(17, ckpt)] + [(17, None)] * 5
    status, v = run(job(maxRestartsWithoutProgress=3), attempts)
    assert (v.action, v.reason) == (fp.FAIL_JOB, goodput.NO_PROGRESS)
    assert status["goodput"]["attempt"] == 4  # attempts 1-4 made none: the 4th is past 3
    assert status["goodput"]["diedAt"] == [17, 17, 17, 17]
    assert v.bound == Bound(
        "maxRestartsWithoutProgress", 4, 3, False, (17, 17, 17, 17), "step 17 or checkpoint 10"
    )
    assert v.message.endswith(
        "4 restarts in a row made no progress past step 17 or checkpoint 10; they ended at "
        "steps 17, 17, 17, 17 (maxRestartsWithoutProgress 3)"
    )
    assert status["restarts"] == 4 and status["countedRestarts"] == 4  # backoffLimit 20 unspent


def test_an_attempt_that_dies_before_its_first_report_made_no_progress() -> None:
    status, v = run(job(maxRestartsWithoutProgress=1), [(30, {"step": 20}), (None, None)] * 1)
    assert v.action == fp.RESTART_GROUP
    assert status["goodput"]["restartsWithoutProgress"] == 1
    assert status["goodput"]["diedAt"] == [20]  # where it started: it never said more
    assert "lastStep" not in status["firstFailure"]
    _, v = run(job(maxRestartsWithoutProgress=1), [(30, {"step": 20}), (None, None), (None, None)])
    assert v.reason == goodput.NO_PROGRESS


def test_a_newer_checkpoint_or_a_higher_step_is_progress() -> None:
    attempts = [(17, {"step": 10}), (17, None), (18, None), (15, {"step": 15}), (16, None)]
    status, v = run(job(maxRestartsWithoutProgress=1), attempts)
    assert v.action == fp.RESTART_GROUP  # never two in a row without progress
    assert status["goodput"]["restartsWithoutProgress"] == 1
    assert status["goodput"]["highestStep"] == 18
    assert status["goodput"]["highestCheckpoint"] == 15


def test_a_disruption_neither_counts_nor_ends_the_run() -> None:
    j = job(maxRestartsWithoutProgress=1)
    status = {
        "restarts": 2,
        "checkpoint": {"step": 10, "attempt": 0},
        "goodput": {"attempt": 1, "highestStep": 17, "restartsWithoutProgress": 1, "diedAt": [17]},
    }
    evicted = verdict(j, disruption=True)
    assert evicted.action == fp.RESTART_GROUP_NOT_COUNTED
    ended = goodput.account(status, {"step": 12, "attempt": 2}, 2, evicted, NOW)
    assert ended is not None and goodput.bound(j, evicted, ended) == evicted
    assert ended.goodput["restartsWithoutProgress"] == 1
    assert ended.costs == {
        "lastStep": 12,
        "resumeStep": 10,
        "stepsLost": 2,
        "detectedAt": "2026-01-01T00:00:04Z",
        "detectedSeconds": 4.0,
    }


def test_a_job_that_never_reports_is_not_judged_and_an_attempt_is_accounted_once() -> None:
    j = job(maxRestartsWithoutProgress=0)
    v = verdict(j)
    assert goodput.account({}, None, 3, v, NOW) is None
    assert goodput.bound(j, v, None) == v
    done = {"goodput": {"attempt": 3, "failures": 4}}
    assert goodput.account(done, {"step": 5, "attempt": 3}, 3, v, NOW) is None


def test_a_worker_replaced_alone_ends_no_attempt() -> None:
    elastic = resolve(ddpjob("j", "ns", nodes=3, minNodes=2, maxNodes=4))
    v = failure_policy.decide(elastic, [crash()], Counts(), alone=None)
    assert v.action == fp.REPLACE_WORKER
    assert goodput.account({}, {"step": 5, "attempt": 0}, 0, v, NOW) is None


def test_the_bound_is_resolved_with_its_default_and_checked() -> None:
    assert job().failure_policy.max_restarts_without_progress == 3
    errors: list[str] = []
    fp.resolve({"maxRestartsWithoutProgress": -1}, errors)
    assert errors == [
        "spec.failurePolicy.maxRestartsWithoutProgress must be an integer of at least 0, not -1"
    ]


def at(seconds: float) -> str:
    return (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_time_a_failure_cost_is_measured_from_it_to_the_next_attempt_s_first_report() -> None:
    """Failed at T0, decided 4 s later; the group runs again 10 s after the failure and reports
    its first step 13 s after it; 7 lost steps at 0.5 s a step are 3.5 s more."""
    progress = {"step": 17, "attempt": 0, "stepSeconds": 0.5, "advanced": T0}
    status: dict[str, Any] = {"checkpoint": {"step": 10, "attempt": 0}, "startTime": at(-96)}
    v = verdict(job())
    ended = goodput.account(status, progress, 0, v, NOW)
    assert ended is not None
    assert ended.costs["detectedSeconds"] == 4.0 and ended.costs["recomputeSeconds"] == 3.5
    new = {**status, "restarts": 1}
    failure_policy.record(new, v, 0, in_place=True)
    goodput.record(new, ended)
    status = new
    restarting = [{"type": "Running", "status": "False", "lastTransitionTime": at(0)}]
    goodput.recovered(new := {**status}, status, restarting, progress, 1)
    assert new == status  # nothing yet
    running = [{"type": "Running", "status": "True", "lastTransitionTime": at(6)}]
    goodput.recovered(new := {**status}, status, running, progress, 1)
    assert new["firstFailure"]["runningAgainSeconds"] == 10.0
    assert "firstStepSeconds" not in new["firstFailure"] and "lostSeconds" not in new["goodput"]
    status = new
    first = {"step": 11, "attempt": 1, "since": at(9)}
    goodput.recovered(new := {**status}, status, running, first, 1)
    assert new["firstFailure"]["firstStepSeconds"] == 13.0
    assert new["goodput"]["lostSeconds"] == 16.5  # 13 s stopped, 3.5 s to do again
    status = new
    goodput.recovered(new := {**status}, status, running, {**first, "step": 30}, 1)
    assert new == status  # once
    assert new["goodput"]["lostSeconds"] == 16.5
    assert goodput.ratio({"goodput": {}}, None, NOW) is None


def test_the_effective_training_time_is_the_steps_kept_at_their_pace_over_the_wall_time() -> None:
    """The job began at step 1 (its first report) and ended at step 120, 0.5 s a step, 100 s
    after its start: 60 s of useful training, 0.6."""
    first = {"step": 1, "attempt": 0, "since": at(10), "sinceStep": 1}
    status: dict[str, Any] = {"startTime": at(0)}
    goodput.begin(new := {}, status, first)
    assert new == {"goodput": {"startStep": 1}}
    status.update(new)
    goodput.begin(again := {}, status, {**first, "attempt": 1, "sinceStep": 40})
    assert again == {}  # opened once
    last = {"step": 120, "attempt": 1, "stepSeconds": 0.5}
    assert goodput.ratio(status, last, NOW + timedelta(seconds=100)) == 0.6
    goodput.settle(end := {"completionTime": at(100)}, status, last, NOW + timedelta(seconds=200))
    assert end["goodput"] == {"startStep": 1, "ratio": 0.6}  # at its completion, not now
    assert goodput.ratio(status, {"step": 120}, NOW) is None  # no pace measured


def test_a_failure_completed_by_its_recovery_is_the_same_failure() -> None:
    """The operator counts a failure when its ``firstFailure`` changes: the recovery times
    added later must not count it twice."""
    first = {"attempt": 0, "reason": "Error", "time": T0, "detectedSeconds": 4.0}
    assert goodput.same_failure(first, {**first, "runningAgainSeconds": 9.0})
    assert goodput.same_failure({**first, "firstStepSeconds": 13.0}, first)
    assert not goodput.same_failure(first, {**first, "attempt": 1})
    assert not goodput.same_failure(first, None)


def test_a_hang_ended_by_a_collective_timeout_cost_the_time_it_hung() -> None:
    """Stall detection off: the waiting rank's gloo timeout ends the attempt 90 s after the
    last step; the failure is timed from that step, not from the container's end."""
    hung = WorkerFailure(0, "j-worker-0", "Error", exit_code=1, time=at(-4))
    v = failure_policy.decide(job(), [hung], NONE, alone="not elastic")
    progress = {"step": 97, "attempt": 2, "advanced": at(-94)}
    ended = goodput.account({"goodput": {"attempt": 1}}, progress, 2, v, NOW)
    assert ended is not None and ended.costs["detectedSeconds"] == 94.0
