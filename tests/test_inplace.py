"""In-place group restarts, decided (``inplace``, ``workers.observe`` of in-place pods, and
``reconcile.plan`` with them): a trainer's failure is found from its pod's restart counts and
attempt, the group is given the next attempt in place (status first), it runs again once every
pod restarted for it, and a restart the kubelet never begins is recreated. Pure."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ddp_operator.decide import group, inplace, inplace_fallback, reconcile
from ddp_operator.decide.conditions import condition, format_time
from ddp_operator.decide.failure_facts import of_pod
from ddp_operator.decide.memory import Memory
from ddp_operator.manifests import builders
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import observe

from jobs import ddpjob

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
BODY = ddpjob("j", "ns", nodes=2, backoffLimit=3, restartStrategy="InPlace")
BODY["metadata"]["uid"] = "job-uid"
JOB = resolve(BODY)


def worker(
    index: int,
    created: int = 0,
    told: int = 0,
    restarts: int = 0,
    watch: int | None = None,
    trainer: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    phase: str = "Running",
    watch_state: dict[str, Any] | None = None,
    finished: bool = False,
    told_at: datetime | None = None,
    counted: int | None = None,
    told_container: str | None = None,
    container: str | None = None,
):
    """An in-place worker pod created in attempt ``created``, told ``told`` (at ``told_at``,
    its trainer's restart count then ``counted`` and its container then ``told_container``;
    without: by an operator that wrote none), as its kubelet reports it: restart counts of its
    trainer and watch, the trainer's state and container (``container``)."""
    manifest = builders.build_worker_pod(JOB, index, created, in_place=True)
    manifest = copy.deepcopy(manifest)
    manifest["metadata"]["annotations"]["ddp-operator.io/attempt"] = str(told)
    if finished:
        manifest["metadata"]["annotations"][c.FINISHED_ANNOTATION] = "true"
    if told_at is not None:
        manifest["metadata"]["annotations"][c.TOLD_AT_ANNOTATION] = format_time(told_at)
    if counted is not None:
        manifest["metadata"]["annotations"][c.TOLD_RESTARTS_ANNOTATION] = str(counted)
    if told_container is not None:
        manifest["metadata"]["annotations"][c.TOLD_CONTAINER_ANNOTATION] = told_container
    manifest["metadata"]["uid"] = f"uid-{index}"
    manifest["spec"]["nodeName"] = "n1"
    trainer_status = {
        "name": "trainer",
        "restartCount": restarts,
        "state": trainer or {"running": {}},
    }
    if last:
        trainer_status["lastState"] = {"terminated": last}
    if container is not None:
        trainer_status["containerID"] = container
    watch_status = {
        "name": "ddp-attempt-watch",
        "restartCount": restarts if watch is None else watch,
        "state": watch_state or {"running": {}},
    }
    manifest["status"] = {"phase": phase, "containerStatuses": [trainer_status, watch_status]}
    return observe(manifest)


def nudge(pods: list[Any], attempt: int, now: datetime) -> list[Any]:
    """The pods to nudge in ``attempt`` at ``now``."""
    return inplace.to_nudge(inplace.standings(pods, attempt, {}), now)


def exited(code: int) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": "Error"}}


def test_a_trainer_that_exits_non_zero_is_a_failure_of_its_attempt() -> None:
    pod = worker(1, trainer=exited(3))
    assert pod.in_place and pod.failed_in_place and pod.exit_code == 3 and pod.watching
    assert pod.phase == "Failed"  # what the pod will be: its watch keeps it running till told
    assert "j-worker-1 exited with code 3 (Error)" in of_pod(pod).describe()
    done = worker(1, trainer=exited(0))
    assert done.phase == "Succeeded" and not done.failed_in_place


def test_a_status_still_of_the_container_told_is_no_end_of_the_attempt_told() -> None:
    """CI of 23ec7d8: a job restarted twice for one failure, the second time recorded as its
    next attempt's worker exiting with the first attempt's exit code. The tell records the
    trainer's container; a status still of that container (its count moved, its watch
    running) is that run's end, not the new attempt's: the restart is still to come."""
    old, new = "containerd://aaa", "containerd://bbb"
    told = {"told": 1, "counted": 0, "told_container": old, "restarts": 1}
    stale = worker(0, trainer=exited(3), container=old, **told)
    assert stale.restart_pending and not stale.failed_in_place and stale.phase == "Running"
    assert inplace.state(stale, 1) == inplace.RESTARTING
    assert stale.trainer_container == old
    rerun = worker(0, trainer=exited(3), container=new, **told)
    assert not rerun.restart_pending and rerun.failed_in_place and rerun.exit_code == 3
    assert worker(0, container=new, **told).trainer_container == new  # what the next tell records
    # Told by an operator that recorded no container: the counts alone, as before.
    unrecorded = worker(0, told=1, counted=0, restarts=1, trainer=exited(3), container=old)
    assert unrecorded.failed_in_place


def test_a_pod_killed_for_a_restart_it_was_told_of_has_not_failed() -> None:
    pod = worker(0, told=1, restarts=0, watch=0, trainer=exited(137))
    assert not pod.failed_in_place and inplace.behind(pod, 1)
    again = worker(0, told=1, restarts=1, last={"exitCode": 137})
    assert not again.failed_in_place and not inplace.behind(again, 1)
    # Restarted once more than told (the kubelet started it with a stale DDP_ATTEMPT): no
    # failure, and its end in that run is its attempt's end.
    extra = worker(0, told=1, restarts=2)
    assert not extra.failed_in_place and not inplace.behind(extra, 1)
    assert worker(0, told=1, restarts=2, trainer=exited(0)).phase == "Succeeded"
    # A trainer that ended while its watch is not running (the pod restarting) is not taken yet.
    restarting = worker(0, told=1, restarts=1, trainer=exited(3), watch_state=exited(86))
    assert not restarting.failed_in_place and restarting.phase == "Running"
    # Told that the job finished, its watch ends: the trainer's end still counts.
    ended_watch = {"terminated": {"exitCode": 0}}
    ending = worker(0, trainer=exited(0), watch_state=ended_watch, finished=True)
    assert ending.finishing and ending.phase == "Succeeded"


def test_a_group_with_a_failed_trainer_is_given_the_next_attempt_in_place() -> None:
    pods = [worker(0), worker(1, trainer=exited(3))]
    plan = reconcile.plan(JOB, {"restarts": 0}, pods, NOW)
    assert plan.status["restarts"] == 1 and plan.attempt == 1
    # Worker 0 first: worker 1 would restart at once and find worker 0's old processes.
    assert [p.name for p in plan.tell] == ["j-worker-0"]
    assert plan.delete == [] and plan.create == []
    killed = worker(0, told=1, restarts=0, watch=0, trainer=exited(137))
    later = reconcile.plan(JOB, plan.status, [killed, pods[1]], NOW)
    assert [p.name for p in later.tell] == ["j-worker-1"]
    again = worker(0, told=1, restarts=1)
    assert [p.name for p in reconcile.plan(JOB, plan.status, [again, pods[1]], NOW).tell] == [
        "j-worker-1"
    ]
    failed = reconcile.plan(JOB, {}, [worker(0, trainer=exited(3)), worker(1)], NOW)
    assert [p.name for p in failed.tell] == ["j-worker-0", "j-worker-1"]
    restarting = condition(plan.status["conditions"], "Restarting")
    assert restarting["reason"] == "RestartingInPlace" and restarting["status"] == "True"
    assert plan.status["phase"] == "Restarting"


def test_pods_not_yet_told_are_told_again_and_the_group_runs_once_all_restarted() -> None:
    status = reconcile.plan(JOB, {}, [worker(0), worker(1, trainer=exited(3))], NOW).status
    # The operator stopped before telling worker 0: the next pass tells it, nothing else.
    pods = [worker(0), worker(1, told=1, restarts=1)]
    plan = reconcile.plan(JOB, status, pods, NOW)
    assert [p.name for p in plan.tell] == ["j-worker-0"] and plan.status["phase"] == "Restarting"
    told = [worker(0, told=1, restarts=0, watch=1), worker(1, told=1, restarts=1)]
    assert reconcile.plan(JOB, status, told, NOW).status["phase"] == "Restarting"
    both = [worker(0, told=1, restarts=1), worker(1, told=1, restarts=1)]
    plan = reconcile.plan(JOB, status, both, NOW)
    assert plan.status["phase"] == "Running" and not plan.tell
    assert condition(plan.status["conditions"], "Restarting")["status"] == "False"


def test_a_restart_the_kubelet_never_begins_is_recreated_after_the_timeout() -> None:
    status = reconcile.plan(JOB, {}, [worker(0), worker(1, trainer=exited(3))], NOW).status
    waiting = [worker(0, told=1, restarts=0, watch=0), worker(1, told=1, restarts=1)]
    # 60 s and twice the pods' grace period (30 s: Kubernetes' default): worker 0's old
    # processes end first, then the others'.
    assert inplace.limit(JOB) == 120
    assert reconcile.plan(JOB, status, waiting, NOW + timedelta(seconds=119)).delete == []
    later = NOW + timedelta(seconds=121)
    plan = reconcile.plan(JOB, status, waiting, later)
    assert plan.status["restarts"] == 2 and len(plan.delete) == 2
    cond = condition(plan.status["conditions"], "Restarting")
    assert cond["reason"] == "WorkerFailed"
    assert "j-worker-0 was not restarted in place within 120s" in cond["message"]
    assert "not in place: j-worker-0 was not restarted in place" in cond["message"]
    quick = copy.deepcopy(BODY)
    quick["spec"]["template"] = {"spec": {"terminationGracePeriodSeconds": 5}}
    assert inplace.limit(resolve(quick)) == 70


def test_a_recreate_decided_and_not_carried_out_is_carried_out_by_the_next_pass() -> None:
    """The operator killed between the status write of a Recreate (a stuck in-place restart)
    and the pods' deletion: the next pass deletes them, as the status says the group is to be
    created anew (``createdInAttempt``); it used to take them for the new attempt's in-place
    group, find that restart stuck at once and count one more restart."""
    status = reconcile.plan(JOB, {}, [worker(0), worker(1, trainer=exited(3))], NOW).status
    waiting = [worker(0, told=1, restarts=0, watch=0), worker(1, told=1, restarts=1)]
    later = NOW + timedelta(seconds=121)
    plan = reconcile.plan(JOB, status, waiting, later)
    assert plan.status["restarts"] == 2 and plan.status["createdInAttempt"] == 2
    assert len(plan.delete) == 2 and not plan.tell
    again = reconcile.plan(JOB, plan.status, waiting, later + timedelta(seconds=1))
    assert [p.name for p in again.delete] == ["j-worker-0", "j-worker-1"] and not again.tell
    assert again.status["restarts"] == 2 and again.status["countedRestarts"] == 2
    # An in-place restart keeps its pods: the attempt they were created in stays.
    assert status["createdInAttempt"] == 0


def test_a_pod_never_given_the_attempt_is_recreated_after_the_timeout() -> None:
    """Worker 0 restarted, but its status never showed its trainer restarted (its restart count
    still 0): worker 1 waits for it, and the group must not wait for ever (seen once on the real
    node; worker 0 then timed out alone in its rendezvous). Both are timed from when worker 0
    was told."""
    status = reconcile.plan(JOB, {}, [worker(0), worker(1, trainer=exited(3))], NOW).status
    waiting = [worker(0, told=1, watch=1, told_at=NOW), worker(1, trainer=exited(3))]
    assert [inplace.state(p, 1, waiting[0]) for p in waiting] == [inplace.RESTARTING, inplace.WAITS]
    soon = reconcile.plan(JOB, status, waiting, NOW + timedelta(seconds=119))
    assert soon.tell == [] and soon.delete == [] and soon.requeue_after == 1
    later = NOW + timedelta(seconds=121)
    assert inplace.stuck(inplace.standings(waiting, 1, status), 1, later, 120) == [
        "j-worker-0 was not restarted in place within 120s of being told attempt 1 "
        "(does node n1 run a kubelet with RestartAllContainers?)",
        "j-worker-1 was not given attempt 1 within 120s "
        "(worker 0's trainer of the attempt before was never seen ending)",
    ]
    plan = reconcile.plan(JOB, status, waiting, later)
    assert plan.status["restarts"] == 2 and len(plan.delete) == 2


def test_back_to_back_failures_time_each_restart_from_its_own_tell() -> None:
    """The defect of issue 41: a failure at t=0, a second at t=100 s, and the job's Restarting
    condition, True throughout, kept t=0; at t=125 s the second restart was taken for stuck
    (measured from t=0) and the group recreated, 25 s after it was told."""
    t100, t125 = NOW + timedelta(seconds=100), NOW + timedelta(seconds=125)
    first = reconcile.plan(JOB, {}, [worker(0), worker(1, trainer=exited(3))], NOW)
    assert first.attempt == 1
    # Both restarted for attempt 1 within a second; worker 1 fails again at t=100 s, seen in
    # the same pass as the restart (the operator was busy, or down, in between).
    restarted = worker(0, told=1, restarts=1, told_at=NOW, counted=0)
    failing = [restarted, worker(1, told=1, restarts=1, told_at=NOW, counted=0, trainer=exited(3))]
    second = reconcile.plan(JOB, first.status, failing, t100)
    assert second.attempt == 2 and [p.name for p in second.tell] == ["j-worker-0"]
    assert condition(second.status["conditions"], "Restarting")["status"] == "True"
    # Worker 0 told at t=100 s, its kubelet yet to restart it at t=125 s: not stuck.
    told = [worker(0, told=2, restarts=1, told_at=t100, counted=1), failing[1]]
    plan = reconcile.plan(JOB, second.status, told, t125)
    assert plan.attempt == 2 and not plan.delete, condition(plan.status["conditions"], "Restarting")
    assert plan.status["countedRestarts"] == 2
    # Nudged (25 s after its tell), looked at again when its next nudge is due (its deadline,
    # 95 s on, later).
    assert [p.name for p in plan.nudge] == ["j-worker-0"] and plan.requeue_after == 20


def test_a_back_to_back_restart_whose_tell_lags_is_timed_from_its_own_start() -> None:
    """Issue 53's defect, in the shape it takes: a second failure while the group still
    restarts (the Restarting condition True since the first, at t=0), decided at t=100 s, and
    a pass that does not see worker 0's tell of attempt 2 yet (watch lag, a tell retried).
    Worker 1 waits for it, timed from attempt 2's start (``attemptStartTime``); it was timed
    from the condition's t=0, found stuck at once, and the group recreated as restart 3."""
    t100 = NOW + timedelta(seconds=100)
    first = reconcile.plan(JOB, {}, [worker(0), worker(1, trainer=exited(3))], NOW)
    restarted = worker(0, told=1, restarts=1, told_at=NOW, counted=0)
    failing = [restarted, worker(1, told=1, restarts=1, told_at=NOW, counted=0, trainer=exited(3))]
    second = reconcile.plan(JOB, first.status, failing, t100)
    assert second.attempt == 2 and second.status["attemptStartTime"] == format_time(t100)
    restarting = condition(second.status["conditions"], "Restarting")
    assert restarting["status"] == "True" and restarting["lastTransitionTime"] == format_time(NOW)
    members = group.of(JOB, second.status, failing, True)
    assert [(s.pod.name, s.state, s.since) for s in members.standing] == [
        ("j-worker-0", inplace.TO_TELL, None),
        ("j-worker-1", inplace.WAITS, t100),
    ]
    lagging = reconcile.plan(JOB, second.status, failing, NOW + timedelta(seconds=125))
    assert lagging.attempt == 2 and not lagging.delete, lagging.status["conditions"]
    assert [p.name for p in lagging.tell] == ["j-worker-0"]
    assert lagging.status["countedRestarts"] == 2
    # Its own deadline still holds: never told, worker 1 is found stuck once it is past.
    late = t100 + timedelta(seconds=inplace.limit(JOB) + 1)
    assert reconcile.plan(JOB, second.status, failing, late).status["restarts"] == 3


def test_a_told_pod_not_restarted_is_nudged_then_again_until_it_restarts() -> None:
    """Its kubelet writes the watch's volume only when it syncs the pod: a copy of the
    ConfigMap older than the tell holds the watch back until the next sync, up to a minute (seen
    in CI: 60 s late, past the deadline). A change of the pod (``nudged-at``) makes one now."""
    told = worker(0, told=1, restarts=0, told_at=NOW, counted=0)
    assert nudge([told], 1, NOW + timedelta(seconds=4)) == []
    assert inplace.recheck(inplace.standings([told], 1, {}), NOW + timedelta(seconds=4), 120) == 1
    assert nudge([told], 1, NOW + timedelta(seconds=5)) == [told]
    nudged = dataclasses.replace(told, nudged_at=format_time(NOW + timedelta(seconds=5)))
    assert nudge([nudged], 1, NOW + timedelta(seconds=24)) == []
    assert nudge([nudged], 1, NOW + timedelta(seconds=25)) == [nudged]
    # A nudge of an earlier attempt's restart counts for nothing; a restarted pod is left be.
    later = dataclasses.replace(nudged, told=2, told_at=format_time(NOW + timedelta(seconds=60)))
    assert nudge([later], 2, NOW + timedelta(seconds=65)) == [later]
    assert (
        nudge(
            [worker(0, told=1, restarts=1, told_at=NOW, counted=0)], 1, NOW + timedelta(seconds=9)
        )
        == []
    )
    plan = reconcile.plan(
        JOB,
        {"restarts": 1},
        [told, worker(1, told=1, restarts=1, told_at=NOW, counted=0)],
        NOW + timedelta(seconds=6),
    )
    assert [p.name for p in plan.nudge] == ["j-worker-0"] and not plan.tell and not plan.delete


def test_a_waiting_pod_is_not_timed_from_worker_0_s_tell_of_an_earlier_attempt() -> None:
    """Issue 53's defect: the second in-place restart, worker 0 not yet told it (its old trainer
    still running, a tell lagging): worker 1 waits, timed from the restart's decision (the
    Restarting condition), not from worker 0's tell of attempt 1 long before."""
    since = format_time(NOW + timedelta(seconds=200))
    conds = [{"type": "Restarting", "status": "True", "lastTransitionTime": since}]
    master = worker(0, told=1, restarts=1, told_at=NOW, counted=0)
    waiting = worker(1, told=1, restarts=1, told_at=NOW, counted=0)
    assert inplace.state(waiting, 2, master) == inplace.WAITS
    at = NOW + timedelta(seconds=210)
    assert (
        inplace.stuck(inplace.standings([master, waiting], 2, {"conditions": conds}), 2, at, 120)
        == []
    )
    assert (
        inplace.recheck(inplace.standings([master, waiting], 2, {"conditions": conds}), at, 120)
        == 110
    )
    late = NOW + timedelta(seconds=321)
    assert (
        len(
            inplace.stuck(
                inplace.standings([master, waiting], 2, {"conditions": conds}), 2, late, 120
            )
        )
        == 1
    )


def test_a_pass_asked_for_at_once_is_not_put_off_by_a_later_ask() -> None:
    plan = reconcile.plan(JOB, {}, [], NOW)
    plan.requeue_after = None
    plan.recheck_in(0.0)
    plan.recheck_in(30)
    assert plan.requeue_after == 0.0


def test_a_pod_still_restarting_holds_back_every_tell_of_a_later_attempt() -> None:
    """A worker that fails while its group restarts: worker 0 restarted for attempt 1 and
    failed at once, worker 1 told attempt 1 but not yet restarted. Attempt 2 is decided, but no
    pod is told it (and the ConfigMap keeps 1) until worker 1 has restarted: its containers
    would take attempt 2 from the ConfigMap while its annotation says 1."""
    pods = [
        worker(0, told=1, restarts=1, told_at=NOW, counted=0, trainer=exited(3)),
        worker(1, told=1, restarts=0, told_at=NOW, counted=0),
    ]
    plan = reconcile.plan(JOB, {"restarts": 1}, pods, NOW + timedelta(seconds=5))
    assert plan.attempt == 2 and plan.tell == [] and not plan.delete
    assert inplace.state(pods[1], 2, pods[0]) == inplace.RESTARTING
    assert inplace.holder(pods, 2) is pods[1]
    restarted = [pods[0], worker(1, told=1, restarts=1, told_at=NOW, counted=0)]
    later = reconcile.plan(JOB, plan.status, restarted, NOW + timedelta(seconds=9))
    assert [p.name for p in later.tell] == ["j-worker-0", "j-worker-1"] and later.attempt == 2


def test_a_pod_whose_containers_start_again_holds_back_the_next_attempt() -> None:
    """The back-to-back flake (tests page, runs 4, 9, 11, 19): worker 1's restart for attempt 1
    had begun (its restart count moved) but its containers had not started when worker 0 failed
    again; told attempt 2 then, with the ConfigMap saying 2, its containers started on 2, the
    count it was told at already held that restart, and none came after: after 70 s the group
    was recreated. Now nobody is told 2 until worker 1's containers run (on attempt 1); told 2
    then, its watch restarts it once more, and the count shows it."""
    creating = {"waiting": {"reason": "ContainerCreating"}}
    failed = worker(0, told=1, restarts=1, told_at=NOW, counted=0, trainer=exited(3))
    starting = worker(1, told=1, restarts=1, told_at=NOW, counted=0, watch_state=creating)
    assert not starting.restart_pending and not starting.started
    assert inplace.state(starting, 1) == inplace.RUNS  # restarted for 1, as far as counts go
    soon = NOW + timedelta(seconds=2)
    plan = reconcile.plan(JOB, {"restarts": 1}, [failed, starting], soon)
    assert plan.attempt == 2 and plan.tell == [] and not plan.delete
    trainer_waits = worker(1, told=1, restarts=1, told_at=NOW, counted=0, trainer=creating)
    assert inplace.holder([failed, trainer_waits], 2) is trainer_waits
    # Its watch never starts: the group is recreated once the restart's time is out, saying so.
    conds = plan.status["conditions"]
    late = soon + timedelta(seconds=121)
    assert inplace.stuck(
        inplace.standings([failed, starting], 2, {"conditions": conds}), 2, late, 120
    ) == [
        f"j-worker-{i} was not given attempt 2 within 120s "
        "(j-worker-1 never started again for attempt 1)"
        for i in (0, 1)
    ]
    up = worker(1, told=1, restarts=1, told_at=NOW, counted=0)
    later = reconcile.plan(JOB, plan.status, [failed, up], soon + timedelta(seconds=3))
    assert [p.name for p in later.tell] == ["j-worker-0", "j-worker-1"]
    # Told 2 at count 1, its watch (on 1) restarts it: the count moves past 1, and it runs 2.
    told = worker(1, told=2, restarts=1, told_at=soon, counted=1)
    assert inplace.state(told, 2) == inplace.RESTARTING
    assert inplace.state(worker(1, told=2, restarts=2, told_at=soon, counted=1), 2) == inplace.RUNS


def test_a_pod_created_and_not_yet_started_holds_back_the_first_restart() -> None:
    """A group's worker still starting its containers (pulling its image) when another fails:
    told attempt 1 then, it would start on 1 from the ConfigMap, with no restart to count."""
    pulling = worker(
        1,
        phase="Pending",
        trainer={"waiting": {"reason": "ContainerCreating"}},
        watch_state={"waiting": {"reason": "ContainerCreating"}},
    )
    plan = reconcile.plan(JOB, {}, [worker(0, trainer=exited(3)), pulling], NOW)
    assert plan.attempt == 1 and plan.tell == [] and not plan.delete
    started = reconcile.plan(JOB, plan.status, [worker(0, trainer=exited(3)), worker(1)], NOW)
    assert [p.name for p in started.tell] == ["j-worker-0", "j-worker-1"]


def test_a_pod_told_a_later_attempt_than_the_next_restarts_once() -> None:
    """Worker 1, never told attempt 1 (worker 0 failed again first), is told attempt 2: one
    restart brings it there (its containers take the attempt from the ConfigMap), and its
    count moving past the one when told says so; counting attempts since its creation, it owed
    two and was taken for stuck."""
    once = worker(1, told=2, restarts=1, told_at=NOW, counted=0)
    assert not once.restart_pending and inplace.state(once, 2) == inplace.RUNS
    assert worker(1, told=2, restarts=1).restart_pending  # told by an operator before the count
    assert worker(1, told=2, restarts=0, told_at=NOW, counted=0).restart_pending


def test_a_pod_that_ended_whole_recreates_the_group() -> None:
    failed = worker(1, phase="Failed", trainer=exited(3))
    plan = reconcile.plan(JOB, {}, [worker(0), failed], NOW)
    assert len(plan.delete) == 2 and not plan.tell
    cond = condition(plan.status["conditions"], "Restarting")
    assert "not in place: j-worker-1 has ended (Failed)" in cond["message"]


def test_the_attempt_survives_in_the_pods_when_the_status_was_lost() -> None:
    pods = [worker(0, told=2, restarts=2), worker(1, told=2, restarts=2)]
    plan = reconcile.plan(JOB, {"restarts": 0}, pods, NOW)
    assert plan.attempt == 2 and not plan.delete and not plan.create


def test_a_refused_cluster_is_on_the_job_and_new_pods_are_plain() -> None:
    plan = reconcile.plan(JOB, {}, [], NOW, refused="checking pod j-worker-0 (dry run): no")
    cond = condition(plan.status["conditions"], "InPlaceRestart")
    assert cond["status"] == "False" and cond["reason"] == "InPlaceUnsupported"
    assert not plan.in_place and plan.create == [0, 1]
    assert [e.reason for e in plan.events] == ["InPlaceUnsupported"]
    later = reconcile.plan(JOB, plan.status, [], NOW + timedelta(seconds=1))
    assert not later.in_place and not later.events
    assert reconcile.plan(JOB, {}, [], NOW).in_place


def test_an_old_restarting_condition_does_not_make_a_new_restart_stuck() -> None:
    since = format_time(NOW - timedelta(hours=1))
    conds = [{"type": "Restarting", "status": "False", "lastTransitionTime": since}]
    pods = [worker(0), worker(1)]
    assert (
        inplace.stuck(inplace.standings(pods, 0, {"conditions": conds}), 0, NOW, inplace.limit(JOB))
        == []
    )


def test_a_pod_that_ended_before_it_restarted_for_the_attempt_is_not_in_it() -> None:
    ended = worker(0, told=1, restarts=0, phase="Succeeded")
    assert not inplace.belongs(ended, 1)
    assert inplace.belongs(worker(0, told=1, restarts=1, phase="Succeeded"), 1)


def unplaceable(index: int, how: str) -> Any:
    """An in-place worker that never ran: no node declares the feature (``scheduler``), or the
    kubelet of the node it was bound to refused it (``kubelet``)."""
    manifest = copy.deepcopy(builders.build_worker_pod(JOB, index, 0, in_place=True))
    manifest["metadata"]["uid"] = f"uid-{index}"
    if how == "scheduler":
        message = f"0/9 nodes are available: 9 {inplace_fallback.NO_NODE_DECLARES}."
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        manifest["status"] = {"phase": "Pending", "conditions": [cond | {"message": message}]}
    else:
        manifest["spec"]["nodeName"] = "old-node"
        manifest["status"] = {
            "phase": "Failed",
            "reason": "PodFeatureUnsupported",
            "message": "Pod requires node features that are not available: "
            "RestartAllContainersOnContainerExits",
        }
    return observe(manifest)


def step(memory: Memory, observed: list[Any]) -> reconcile.Plan:
    """One pass as the runner makes it: plan, remember, take the status as written."""
    plan = reconcile.plan(JOB, memory.status, observed, NOW, 1, None, memory.seen)
    memory.passed(plan.own, plan.attempt, False)
    memory.deleting(plan.delete)
    memory.status.update(plan.status)
    return plan


@pytest.mark.parametrize("how", ["scheduler", "kubelet"])
def test_in_place_pods_no_node_can_run_are_built_again_plain_and_nothing_failed(
    how: str,
) -> None:
    memory = Memory()
    pods = [unplaceable(0, "scheduler"), unplaceable(1, how)]
    plan = step(memory, pods)
    cond = condition(plan.status["conditions"], "InPlaceRestart")
    assert cond["status"] == "False" and cond["reason"] == "NodesLackInPlaceRestart", cond
    assert "j-worker-0: 0/9 nodes are available" in cond["message"], cond
    assert [p.name for p in plan.delete] == ["j-worker-0", "j-worker-1"] and not plan.create
    assert plan.attempt == 0 and "NodesLackInPlaceRestart" in [e.reason for e in plan.events]
    going = [dataclasses.replace(p, deleting=True) for p in pods]
    assert not step(memory, going).create and memory.attempt == 0
    for pod in pods:
        memory.gone(pod, "job-uid")
    plan = step(memory, [])
    assert plan.create == [0, 1] and not plan.in_place and plan.attempt == 0
    assert memory.status["phase"] != "Failed" and not plan.events


def test_a_kubelet_refusing_an_in_place_pod_is_named() -> None:
    why = inplace_fallback.unplaceable([unplaceable(1, "kubelet")])
    assert why == (
        "j-worker-1 was refused by node old-node: Pod requires node features that are not "
        "available: RestartAllContainersOnContainerExits"
    )


def test_pods_that_can_run_in_place_keep_it() -> None:
    assert inplace_fallback.unplaceable([worker(0), worker(1)]) is None
    pending = dataclasses.replace(
        worker(0), phase="Pending", unschedulable="0/9: 9 Insufficient cpu"
    )
    assert inplace_fallback.unplaceable([pending]) is None
    assert reconcile.plan(JOB, {}, [pending, worker(1)], NOW).in_place


def test_a_worker_that_finished_restarts_in_place_with_its_group() -> None:
    pods = [worker(0, trainer=exited(0)), worker(1, trainer=exited(3))]
    plan = reconcile.plan(JOB, {}, pods, NOW)
    assert [p.name for p in plan.tell] == ["j-worker-0", "j-worker-1"] and not plan.delete


def test_a_finished_job_lets_its_in_place_pods_end_once() -> None:
    pods = [worker(0, trainer=exited(0)), worker(1, trainer=exited(0))]
    plan = reconcile.plan(JOB, {}, pods, NOW)
    assert plan.status["phase"] == "Succeeded" and not plan.delete
    assert [p.name for p in plan.finish_pods] == ["j-worker-0", "j-worker-1"]
    told = [dataclasses.replace(p, finishing=True) for p in pods]
    assert reconcile.plan(JOB, plan.status, told, NOW).finish_pods == []
    failed = [worker(0, told=3, restarts=3), worker(1, told=3, restarts=3, trainer=exited(3))]
    last = reconcile.plan(JOB, {"restarts": 3}, failed, NOW)
    assert last.status["phase"] == "Failed"
    # The failed worker is kept (its end on record), the running one deleted (cleanPodPolicy).
    assert [p.name for p in last.delete] == ["j-worker-0"]
    assert [p.name for p in last.finish_pods] == ["j-worker-1"]


def test_pods_whose_watch_cannot_start_are_built_again_plain_and_nothing_failed() -> None:
    """A trainer image without /bin/sh (distroless): the watch never starts (the runtime's
    StartError, then RunContainerError while it backs off); the job falls back to Recreate."""
    message = 'exec: "/bin/sh": stat /bin/sh: no such file or directory'
    backing_off = {"waiting": {"reason": "RunContainerError", "message": message}}
    pods = [worker(0, watch_state=backing_off), worker(1, watch_state=backing_off)]
    assert pods[0].watch_broken == message and not pods[0].watching
    failed_start = {"terminated": {"reason": "StartError", "exitCode": 128, "message": message}}
    assert worker(1, watch_state=failed_start).watch_broken == message
    assert worker(1).watch_broken is None and inplace_fallback.unstartable([worker(1)]) is None
    memory = Memory()
    step(memory, [worker(0), worker(1)])  # seen running first: the trainers did start
    plan = step(memory, pods)
    cond = condition(plan.status["conditions"], "InPlaceRestart")
    assert cond["status"] == "False" and cond["reason"] == "InPlaceWatchCannotStart", cond
    assert "j-worker-0: container ddp-attempt-watch cannot start" in cond["message"], cond
    assert (
        message in cond["message"]
        and "/bin/sh and sleep from the trainer's image" in cond["message"]
    )
    assert [p.name for p in plan.delete] == ["j-worker-0", "j-worker-1"] and not plan.create
    assert plan.attempt == 0 and "InPlaceWatchCannotStart" in [e.reason for e in plan.events]
    for pod in pods:
        memory.gone(pod, "job-uid")
    plan = step(memory, [])
    assert plan.create == [0, 1] and not plan.in_place and plan.attempt == 0
    assert memory.status["phase"] != "Failed" and memory.status["restarts"] == 0


def test_a_watch_in_crash_loop_back_off_makes_the_group_recreated() -> None:
    """In-place restarts never meet the kubelet's crash-loop back-off (bench/inplace_backoff.py:
    restarts 1-6 of one pod took 2-4 s each); a watch container killed alone does, and would not
    see its next attempt for up to 300 s: the group is recreated instead."""
    backoff = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}}
    pods = [worker(0, watch_state=backoff), worker(1, trainer=exited(3))]
    assert pods[0].watch_backoff == "back-off 40s restarting"
    plan = reconcile.plan(JOB, {}, pods, NOW)
    assert len(plan.delete) == 2 and not plan.tell
    cond = condition(plan.status["conditions"], "Restarting")
    assert (
        "not in place: j-worker-0's ddp-attempt-watch container is in crash-loop back-off"
        in (cond["message"])
    )
