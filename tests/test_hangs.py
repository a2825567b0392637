"""A training that stops advancing (``hangs``): judged from its reports and its Running
condition only, never before the attempt's first report, never for a job that does not report
or is off; the automatic timeout from the step interval within its floor and ceiling; a stall
goes through the failure policy (a counted group restart by default). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddp_operator.decide import hangs, progress_report
from ddp_operator.decide.reconcile import plan
from ddp_operator.model.jobspec import SpecError, resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(**stall):
    body = ddpjob("j", "ns", nodes=2, stallDetection=stall)
    body["metadata"]["uid"] = "u"
    return resolve(body)


def running(since: float = 600) -> list[dict]:
    return [{"type": "Running", "status": "True", "lastTransitionTime": at(since)}]


def report(step: int = 42, advanced: float = 0, attempt: int = 0, **more) -> dict:
    return {"step": step, "attempt": attempt, "advanced": at(advanced), "updated": at(0), **more}


def test_the_automatic_timeout_is_ten_steps_within_its_floor_and_ceiling() -> None:
    j = job()
    assert hangs.timeout(j, None) == 300  # no interval yet: the ceiling
    assert hangs.timeout(j, {"stepSeconds": 1.0}) == 120  # the floor
    assert hangs.timeout(j, {"stepSeconds": 20.0}) == 200
    assert hangs.timeout(j, {"stepSeconds": 90.0}) == 300  # the ceiling
    assert hangs.timeout(job(timeoutSeconds=45), {"stepSeconds": 90.0}) == 45
    # Issue 54: never under three steps: a 400 s step was always "stalled" under the ceiling.
    assert hangs.timeout(j, {"stepSeconds": 400.0}) == 1200


def test_an_announced_phase_is_timed_by_its_own_bound_then_the_clock_starts_anew() -> None:
    """A 6-minute checkpoint save after ``report(step, phase="checkpoint", phase_timeout=900)``
    is no stall (the stall timeout is 60 s); past its own bound it is one, said so; the report
    after it, at the same step, restarts the clock."""
    j, status = job(timeoutSeconds=60), {"conditions": running(since=2000)}
    saving = report(advanced=400, phase="checkpoint", phaseTimeoutSeconds=900, phaseSince=at(360))
    stall, later = hangs.check(j, status, saving, 0, NOW)
    assert stall is None and later == pytest.approx(540.0)
    stall, _ = hangs.check(j, status, {**saving, "phaseSince": at(901)}, 0, NOW)
    assert stall is not None and stall.describe() == (
        f"the training has been in phase checkpoint since {at(901)} at step 42 (phase timeout 900s)"
    )
    unbounded = {k: v for k, v in saving.items() if k != "phaseTimeoutSeconds"}
    assert hangs.check(j, status, unbounded, 0, NOW)[1] == pytest.approx(3600 - 360)
    # Unbounded, it never gets less than the stall timeout itself.
    assert hangs.check(job(timeoutSeconds=7200), status, unbounded, 0, NOW)[1] == 7200 - 360
    # The phase over, the same step: timed from that report, not from the step's advance.
    old = {**saving, "since": at(900), "sinceStep": 0, "updated": at(1)}
    new = progress_report.carry(old, {"step": 42, "attempt": 0, "updated": at(0), "metrics": {}})
    assert new["advanced"] == at(0) and "phaseSince" not in new
    # and the step interval is measured anew: the phase was no step's time.
    assert (new["since"], new["sinceStep"]) == (at(0), 42)
    assert hangs.check(j, status, new, 0, NOW)[0] is None
    # A phase carried over reports keeps its start; a new phase starts its own.
    again = progress_report.carry(saving | {"since": at(900)}, {**new, "phase": "checkpoint"})
    assert again["phaseSince"] == at(360)
    other = progress_report.carry(saving | {"since": at(900)}, {**new, "phase": "eval"})
    assert other["phaseSince"] == at(0)


def test_a_step_that_has_not_advanced_for_the_timeout_is_a_stall() -> None:
    j = job(timeoutSeconds=60)
    stall, later = hangs.check(j, {"conditions": running()}, report(advanced=59), 0, NOW)
    assert stall is None and later == pytest.approx(1.0)
    stall, later = hangs.check(j, {"conditions": running()}, report(advanced=61), 0, NOW)
    assert stall is not None and later is None
    assert stall.reason == "Stalled" and stall.describe() == (
        f"the training's step has not advanced from 42 since {at(61)} (stall timeout 60s)"
    )


@pytest.mark.parametrize(
    ("conditions", "progress", "why"),
    [
        (running(), None, "it never reported"),
        (running(), report(advanced=900, attempt=0), "off"),
        (running(), report(advanced=900, attempt=1), "a report of another attempt"),
        ([{"type": "Running", "status": "False", "lastTransitionTime": at(900)}], report(900), "-"),
        ([], report(advanced=900), "never running"),
    ],
)
def test_no_stall_without_a_report_of_this_attempt_while_running(conditions, progress, why) -> None:
    j = job(enabled=False) if why == "off" else job(timeoutSeconds=60)
    assert hangs.check(j, {"conditions": conditions}, progress, 0, NOW) == (None, None), why


def test_a_resumed_or_restarted_group_starts_the_clock_afresh() -> None:
    """Suspended for an hour: the last report is old, but the group runs again since 10 s."""
    j = job(timeoutSeconds=60)
    stall, later = hangs.check(j, {"conditions": running(since=10)}, report(advanced=3600), 0, NOW)
    assert stall is None and later == pytest.approx(50.0)


def test_a_stall_restarts_the_group_counted_and_says_so() -> None:
    j = job(timeoutSeconds=60)
    pods = [WorkerPod(f"j-worker-{i}", i, 0, "Running", uid=f"p{i}", owner_uid="u") for i in (0, 1)]
    status = {"restarts": 0, "conditions": running()}
    p = plan(j, status, pods, NOW, generation=1, progress=report(advanced=120))
    assert p.status["restarts"] == 1 and p.status["countedRestarts"] == 1
    restarting = next(c for c in p.status["conditions"] if c["type"] == "Restarting")
    assert restarting["message"].startswith("the training's step has not advanced from 42")
    assert p.status["firstFailure"]["reason"] == "Stalled"
    # Not stalled yet: the pass asks to look again when it would be.
    p = plan(j, status, pods, NOW, generation=1, progress=report(advanced=20))
    assert p.status["restarts"] == 0 and p.requeue_after == pytest.approx(40.0)


def test_a_rule_on_stalled_can_fail_the_job() -> None:
    body = ddpjob("j", "ns", nodes=2, stallDetection={"timeoutSeconds": 60})
    body["spec"]["failurePolicy"] = {"rules": [{"action": "FailJob", "onReasons": ["Stalled"]}]}
    body["metadata"]["uid"] = "u"
    pods = [WorkerPod(f"j-worker-{i}", i, 0, "Running", uid=f"p{i}", owner_uid="u") for i in (0, 1)]
    status = {"conditions": running()}
    p = plan(resolve(body), status, pods, NOW, generation=1, progress=report(advanced=120))
    assert p.status["phase"] == "Failed"


def test_a_timeout_under_30_seconds_is_refused() -> None:
    with pytest.raises(SpecError, match=r"spec\.stallDetection\.timeoutSeconds"):
        job(timeoutSeconds=5)


def test_an_elastic_replacement_starts_the_clock_and_none_is_judged_while_it_goes_on() -> None:
    j = job(timeoutSeconds=60)
    replaced = {"action": "ReplaceWorker", "attempt": 0, "time": at(10)}
    status = {"conditions": running(), "firstFailure": replaced}
    stall, later = hangs.check(j, status, report(advanced=300), 0, NOW)
    assert stall is None and later == pytest.approx(50.0)
    going = {**status, "replacing": [{"index": 2, "uid": "p2"}]}
    assert hangs.check(j, going, report(advanced=300), 0, NOW) == (None, None)
