"""Unit tests of the pure planner: observed pods and status in, the next status and actions out."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from ddp_operator.decide.conditions import is_true
from ddp_operator.decide.failures import Failure
from ddp_operator.decide.reconcile import blocked, plan
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod, observe

from jobs import ddpjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)
own = functools.partial(WorkerPod, owner_uid="u")  # a pod the job "u" controls


def job(**spec):
    body = ddpjob("j", "ns", **spec)
    body["metadata"]["uid"] = "u"
    return resolve(body)


def pods(n: int, phase: str = "Running", attempt: int = 0, **kw) -> list[WorkerPod]:
    return [own(f"j-worker-{i}", i, attempt, phase, uid=f"p{i}", **kw) for i in range(n)]


def cond(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def advance(j, status: dict, observed: list[WorkerPod], now=NOW, failure=None):
    p = plan(j, status, observed, now, generation=1, failure=failure)
    return p, {**status, **p.status}


def test_new_job_creates_every_worker_and_sets_start_time() -> None:
    p = plan(job(nodes=4), {}, [], NOW)
    assert p.create == [0, 1, 2, 3] and p.delete == []
    assert p.status["phase"] == "Pending" and p.status["startTime"] == "2026-01-01T00:00:00Z"
    assert cond(p.status, "Created")["status"] == "False"


def test_pods_seen_before_any_status_was_written_set_the_start_time() -> None:
    # The status after creating pods waits for the watch to show them; an operator killed
    # meanwhile leaves pods and no startTime, and the next pass (or operator) sets it.
    p = plan(job(nodes=2, activeDeadlineSeconds=60), {}, pods(2, "Pending"), NOW)
    assert p.create == [] and p.status["startTime"] == "2026-01-01T00:00:00Z"
    assert p.requeue_after == 60


def test_all_running_sets_created_and_running_with_events() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, [])
    p, st = advance(j, st, pods(2, "Pending"))
    assert is_true(st["conditions"], "Created") and not is_true(st["conditions"], "Running")
    assert [e.reason for e in p.events] == ["WorkersCreated"]
    p, st = advance(j, st, pods(2))
    assert st["phase"] == "Running" and st["workers"]["running"] == 2
    assert [e.reason for e in p.events] == ["AllWorkersRunning"]
    p, st2 = advance(j, st, pods(2))  # nothing changed: no events, same status
    assert p.events == [] and st2 == st and p.create == [] and p.delete == []


def test_all_workers_exit_zero_is_success() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    p, st = advance(j, st, [*pods(1, "Succeeded"), own("j-worker-1", 1, 0, "Running")])
    assert st["phase"] == "Running"
    p, st = advance(j, st, pods(2, "Succeeded"))
    assert st["phase"] == "Succeeded" and st["completionTime"]
    assert cond(st, "Succeeded")["reason"] == "AllWorkersSucceeded"
    assert p.delete == []  # nothing left running


def test_worker_failure_restarts_the_whole_group() -> None:
    j = job(nodes=3, backoffLimit=2)
    _, st = advance(j, {}, pods(3))
    failed = own("j-worker-1", 1, 0, "Failed", uid="p1", exit_code=3, reason="Error", node="n1")
    observed = [pods(3)[0], failed, pods(3)[2]]
    p, st = advance(j, st, observed)
    assert st["restarts"] == 1 and st["phase"] == "Restarting"
    assert sorted(x.name for x in p.delete) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert [e.reason for e in p.events] == ["WorkerFailed"]
    assert "j-worker-1 exited with code 3" in p.events[0].message
    assert p.events[0].type == "Warning"
    # Old pods still terminating: nothing of attempt 1 is created until all of them are gone,
    # so no new worker can meet a process of the old group.
    terminating = [own(x.name, x.index, 0, x.phase, deleting=True) for x in observed[:2]]
    p, st = advance(j, st, terminating)
    assert p.create == [] and p.attempt == 1 and p.delete == []
    assert cond(st, "Created")["reason"] == "PreviousPodsTerminating"
    assert "j-worker-0, j-worker-1" in cond(st, "Created")["message"]
    p, st = advance(j, st, [])
    assert p.create == [0, 1, 2] and p.attempt == 1
    # New group up: Restarting clears, Running again.
    p, st = advance(j, st, pods(3, attempt=1))
    assert st["phase"] == "Running" and not is_true(st["conditions"], "Restarting")
    assert cond(st, "Restarting")["reason"] == "Restarted"


def test_backoff_limit_exhausted_fails_and_stops_running_workers() -> None:
    j = job(nodes=2, backoffLimit=1)
    st = {"restarts": 1}
    _, st = advance(j, st, pods(2, attempt=1))
    bad = own("j-worker-0", 0, 1, "Failed", uid="a", exit_code=137, reason="OOMKilled")
    running = own("j-worker-1", 1, 1, "Running", uid="b")
    p, st = advance(j, st, [bad, running])
    assert st["phase"] == "Failed" and cond(st, "Failed")["reason"] == "BackoffLimitExceeded"
    assert "exited with code 137 (OOMKilled, killed by SIGKILL)" in cond(st, "Failed")["message"]
    assert [x.name for x in p.delete] == ["j-worker-1"]  # cleanPodPolicy Running


def test_deleted_worker_counts_as_failure_once_created() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    _p, st = advance(j, st, pods(1))
    assert st["restarts"] == 1 and "j-worker-1 was deleted" in cond(st, "Restarting")["message"]


def test_missing_worker_before_creation_is_just_created() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, [])
    p, st = advance(j, st, pods(1))
    assert p.create == [1] and st["restarts"] == 0


def test_pod_being_deleted_by_someone_else_is_a_failure() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    evicted = own("j-worker-0", 0, 0, "Running", uid="x", deleting=True)
    _p, st = advance(j, st, [evicted, pods(2)[1]])
    assert st["restarts"] == 1 and "being deleted" in cond(st, "Restarting")["message"]


def test_suspend_deletes_pods_and_resume_recreates_them() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    p, st = advance(job(nodes=2, suspend=True), st, pods(2))
    assert st["phase"] == "Suspended" and len(p.delete) == 2
    assert [e.reason for e in p.events] == ["Suspended"]
    p, st = advance(job(nodes=2, suspend=True), st, [])
    assert p.create == [] and st["phase"] == "Suspended"
    p, st = advance(j, st, [], now=NOW + timedelta(hours=1))
    assert p.create == [0, 1] and st["restarts"] == 0
    assert st["startTime"] == "2026-01-01T01:00:00Z"
    assert "Resumed" in [e.reason for e in p.events]


def test_resumed_while_the_suspended_group_still_goes_waits_for_it_without_a_restart() -> None:
    """Resumed before the suspended group's pods are gone (their grace period): their ending
    is no failure; the new group comes once they are gone, in the same attempt."""
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    _, st = advance(job(nodes=2, suspend=True), st, pods(2))
    going = pods(2, deleting=True)
    p, st = advance(j, st, going)
    assert st["restarts"] == 0 and p.create == [] and not p.delete
    assert cond(st, "Suspended")["reason"] == "Resuming" and st["phase"] != "Restarting"
    p, st = advance(j, st, pods(2, "Failed", deleting=True, exit_code=143))  # SIGTERM'd
    assert st["restarts"] == 0 and p.create == []
    p, st = advance(j, st, [])
    assert (
        p.create == [0, 1] and st["restarts"] == 0 and cond(st, "Suspended")["reason"] == "Resumed"
    )


def test_active_deadline() -> None:
    j = job(nodes=1, activeDeadlineSeconds=60)
    p, st = advance(j, {}, [])
    assert p.requeue_after == 60
    p, st = advance(j, st, pods(1), now=NOW + timedelta(seconds=30))
    assert p.requeue_after == 30
    p, st = advance(j, st, pods(1), now=NOW + timedelta(seconds=61))
    assert st["phase"] == "Failed" and cond(st, "Failed")["reason"] == "DeadlineExceeded"
    assert [x.name for x in p.delete] == ["j-worker-0"]


def test_ttl_after_finished_deletes_the_job() -> None:
    j = job(nodes=1, ttlSecondsAfterFinished=10)
    _, st = advance(j, {}, pods(1))
    p, st = advance(j, st, pods(1, "Succeeded"))
    assert p.requeue_after == 10 and not p.delete_job
    p, st = advance(j, st, pods(1, "Succeeded"), now=NOW + timedelta(seconds=10))
    assert p.delete_job


def test_worker0_success_policy_stops_the_others() -> None:
    j = job(nodes=2, successPolicy="Worker0")
    _, st = advance(j, {}, pods(2))
    p, st = advance(j, st, [pods(1, "Succeeded")[0], own("j-worker-1", 1, 0, "Running")])
    assert st["phase"] == "Succeeded" and [x.name for x in p.delete] == ["j-worker-1"]


def test_clean_pod_policy_all_and_none() -> None:
    for policy, expected in (("All", 2), ("None", 0)):
        j = job(nodes=2, cleanPodPolicy=policy)
        _, st = advance(j, {}, pods(2))
        p, st = advance(j, st, pods(2, "Succeeded"))
        assert len(p.delete) == expected, policy


def test_unschedulable_condition_carries_the_scheduler_message() -> None:
    j = job(nodes=2)
    msg = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    _, st = advance(j, {}, [])
    p, st = advance(j, st, pods(2, "Pending", unschedulable=msg))
    c = cond(st, "Unschedulable")
    assert c["status"] == "True" and msg in c["message"] and "j-worker-0" in c["message"]
    assert "Unschedulable" in [e.reason for e in p.events]
    _, st = advance(j, st, pods(2))
    assert cond(st, "Unschedulable")["status"] == "False"


def test_stale_pods_from_an_older_attempt_are_deleted() -> None:
    j = job(nodes=2)
    st = {"restarts": 2}
    old = own("j-worker-0", 0, 1, "Running", uid="old")
    p, _ = advance(j, st, [old])
    assert [x.uid for x in p.delete] == ["old"] and p.create == []
    p, _ = advance(j, st, [])
    assert p.create == [0, 1]


def test_observe_reads_exit_code_and_unschedulable_reason() -> None:
    j = job(nodes=1)
    pod = builders.build_worker_pod(j, 0, attempt=1)
    pod["metadata"]["uid"] = "u0"
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
        ],
    }
    w = observe(pod)
    assert w is not None and (w.index, w.attempt, w.exit_code, w.reason) == (0, 1, 3, "Error")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
        ],
    }
    assert observe(pod).unschedulable == "no"
    assert observe({"metadata": {"name": "x", "labels": {}}}) is None


# Ownership: only pods the job controls count; the rest are reported, never used or deleted.


def foreign(name: str, index: int, phase: str = "Succeeded", owner: str | None = None, **kw):
    uid = "old" if owner else None
    return WorkerPod(name, index, 0, phase, uid=f"f{index}", owner_uid=uid, owner=owner, **kw)


def test_pods_of_an_earlier_job_of_the_same_name_never_count() -> None:
    j = job(nodes=2)
    old = [foreign(f"j-worker-{i}", i, owner="DDPJob/j (uid old)") for i in range(2)]
    p, st = advance(j, {}, old)
    assert st["phase"] == "Pending" and p.create == [] and p.delete == []
    blocked = cond(st, "Blocked")
    assert blocked["status"] == "True" and blocked["reason"] == "WaitingForPreviousJob"
    assert "pod j-worker-0" in blocked["message"] and "DDPJob/j (uid old)" in blocked["message"]
    assert [e.reason for e in p.events] == ["WaitingForPreviousJob"]
    # The old pods go: the job creates its own and the condition clears.
    p, st = advance(j, st, [])
    assert p.create == [0, 1] and cond(st, "Blocked")["status"] == "False"


def test_a_foreign_pod_with_a_worker_name_is_reported_and_left_alone() -> None:
    j = job(nodes=2)
    stranger = foreign("j-worker-1", 1, "Running")
    p, st = advance(j, {}, [stranger])
    assert p.create == [0] and p.delete == [] and p.force_delete == []
    blocked = cond(st, "Blocked")
    assert blocked["reason"] == "NameConflict" and "pod j-worker-1" in blocked["message"]
    assert "no controller" in blocked["message"]


def test_transient_failure_blocks_then_clears() -> None:
    j = job(nodes=2)
    quota = Failure(False, "QuotaExceeded", "creating pod j-worker-0: exceeded quota: q")
    p, st = advance(j, {}, [])
    p, st = advance(j, st, [], failure=quota)
    assert p.create == [0, 1]  # retried
    blocked = cond(st, "Blocked")
    assert (blocked["status"], blocked["reason"]) == ("True", "QuotaExceeded")
    assert "exceeded quota" in blocked["message"] and st["phase"] == "Pending"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "QuotaExceeded")]
    p, st = advance(j, st, pods(2, "Pending"))
    assert cond(st, "Blocked")["status"] == "False"


def test_permanent_failure_fails_the_job_at_once() -> None:
    j = job(nodes=2)
    bad = Failure(True, "InvalidPodTemplate", "spec.containers[0].image: Required value")
    p, st = advance(j, {}, [], failure=bad)
    assert st["phase"] == "Failed" and p.create == []
    failed = cond(st, "Failed")
    assert failed["reason"] == "InvalidPodTemplate" and "image: Required" in failed["message"]


# Terminating pods: lost nodes are force-deleted; finalizers are named.

GONE = "2025-12-31T23:59:00Z"  # a deletionTimestamp a minute before NOW


def test_worker_lost_with_its_node_restarts_the_group_and_is_force_deleted() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    lost = own(
        "j-worker-1",
        1,
        0,
        "Running",
        uid="p1",
        node="n1",
        deleting=True,
        deletion_time="2026-01-01T00:00:20Z",
        node_lost="Taint manager: deleting due to NoExecute",
    )
    p, st = advance(j, st, [pods(1)[0], lost])
    assert st["restarts"] == 1 and [x.name for x in p.delete] == ["j-worker-0"]
    assert [x.name for x in p.force_delete] == ["j-worker-1"]
    assert "j-worker-1 was lost with its node n1" in cond(st, "Restarting")["message"]


def test_terminating_pods_past_their_grace_are_forced_or_named() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))
    _, st = advance(j, st, [pods(1)[0], own("j-worker-1", 1, 0, "Failed", uid="p1", exit_code=1)])
    assert st["restarts"] == 1
    no_kubelet = own("j-worker-0", 0, 0, "Running", uid="p0", deleting=True, deletion_time=GONE)
    held = own(
        "j-worker-1",
        1,
        0,
        "Failed",
        uid="p1",
        deleting=True,
        deletion_time=GONE,
        finalizers=("example.com/hold",),
    )
    p, st = advance(j, st, [no_kubelet, held])
    assert [x.name for x in p.force_delete] == ["j-worker-0"] and p.create == []
    blocked = cond(st, "Blocked")
    assert blocked["reason"] == "PodStuckTerminating" and "example.com/hold" in blocked["message"]
    assert "j-worker-1" in blocked["message"] and "j-worker-0" not in blocked["message"]
    # Within its grace, a terminating pod is neither forced nor named: a re-check is due.
    fresh = own(
        "j-worker-0", 0, 0, "Running", uid="p0", deleting=True, deletion_time="2026-01-01T00:00:10Z"
    )
    p, st2 = advance(j, st, [fresh])
    assert p.force_delete == [] and cond(st2, "Blocked")["status"] == "False"
    assert p.requeue_after == 25.0


def test_observe_reads_owner_finalizers_and_node_loss() -> None:
    pod = builders.build_worker_pod(job(nodes=1), 0)
    pod["metadata"].update(finalizers=["example.com/hold"], deletionTimestamp=GONE)
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
            }
        ],
    }
    w = observe(pod)
    assert (w.owner_uid, w.owner) == ("u", "DDPJob/j (uid u)")
    assert w.finalizers == ("example.com/hold",) and w.deletion_time == GONE and w.deleting
    assert w.node_lost == "Taint manager: deleting due to NoExecute taint"


def test_a_spec_that_cannot_be_resolved_fails_the_job_saying_why() -> None:
    from ddp_operator.decide.failures import classify
    from ddp_operator.decide.reconcile import rejected
    from ddp_operator.model.jobspec import SpecError

    body = ddpjob("j", "ns", nodes=2, accelerator={"perNode": 2})  # no resource
    try:
        resolve(body)
    except SpecError as exc:
        failure = classify(exc)
    else:
        raise AssertionError("resolve accepted an accelerator without a resource")
    assert (failure.permanent, failure.reason) == (True, "InvalidSpec")
    p = rejected({}, failure, NOW, generation=3)
    assert p.status["phase"] == "Failed" and cond(p.status, "Failed")["reason"] == "InvalidSpec"
    assert "resource" in cond(p.status, "Failed")["message"] and p.create == []
    assert [e.reason for e in p.events] == ["InvalidSpec"]


def test_a_worker_seen_and_gone_before_the_group_was_complete_is_a_failure() -> None:
    """Never re-created in the same attempt: that would be a duplicate worker. The group of
    the next attempt is created on the restart's own pass (no pod of the old one is left)."""
    j = job(nodes=2)
    _, st = advance(j, {}, [])
    p = plan(j, st, pods(1), NOW, generation=1)  # worker 1 not yet observed; 0 seen
    assert p.create == [1] and p.status["restarts"] == 0
    p = plan(j, st, [], NOW, generation=1, seen={("j-worker-0", 0)})
    assert p.status["restarts"] == 1 and p.create == [0, 1]
    assert p.status["createdInAttempt"] == 1
    assert "j-worker-0 was deleted" in cond(p.status, "Restarting")["message"]
    p = plan(j, st, [], NOW, generation=1, seen={("j-worker-0", 1)})  # another attempt's
    assert p.create == [0, 1] and p.status["restarts"] == 0


def test_a_job_whose_pods_cannot_be_seen_is_blocked_saying_why_and_nothing_else() -> None:
    j = job(nodes=2)
    _, st = advance(j, {}, pods(2))  # Running
    unseen = Failure(False, "Forbidden", "listing the pods in namespace ns: forbidden")
    p = blocked(st, unseen, NOW, 1)
    assert p.status["phase"] == "Running" and set(p.status) == {"conditions", "phase"}
    assert cond(p.status, "Blocked")["message"] == unseen.message
    assert [e.reason for e in p.events] == ["Forbidden"] and not p.create
    _, done = advance(j, st, pods(2, "Succeeded"))
    assert blocked(done, unseen, NOW, 1).status == {}  # a finished job stays as it is
