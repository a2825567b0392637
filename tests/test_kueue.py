"""Unit tests of Kueue's plain-pod group integration, the pure parts: what the workers carry, the
Queued and Admitted conditions, an eviction that is no failure, and the mark that ends the group.
Real Kueue: test_kueue_admission.py."""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import UTC, datetime

from ddp_operator.decide import kueue
from ddp_operator.decide.memory import Memory
from ddp_operator.decide.reconcile import plan
from ddp_operator.manifests import builders
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod, observe

from jobs import ddpjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)
own = functools.partial(WorkerPod, owner_uid="0123456789ab", queue_managed=True)


def job(queue: str | None = "team-a", labels: dict | None = None, **spec):
    body = ddpjob("j", "ns", **spec)
    body["metadata"]["uid"] = "0123456789ab"
    body["metadata"]["labels"] = {
        **({c.KUEUE_QUEUE_LABEL: queue} if queue else {}),
        **(labels or {}),
    }
    return resolve(body)


def group(n: int, **kw) -> list[WorkerPod]:
    return [own(f"j-worker-{i}", i, 0, uid=f"p{i}", **kw) for i in range(n)]


def step(j, memory: Memory, observed: list[WorkerPod], told: kueue.Holdup | None = None):
    """One pass as the runner makes it (``told``: what the group's Workload says)."""
    p = plan(j, memory.status, observed, NOW, 1, None, memory.seen, memory.evicted, told)
    memory.passed(p.own, p.attempt, j.suspend)
    memory.deleting(p.delete + p.force_delete)
    memory.status.update(p.status)
    return p


def cond(status: dict, type_: str) -> dict:
    return next(x for x in status["conditions"] if x["type"] == type_)


def test_every_worker_joins_one_group_named_after_the_job_and_its_uid() -> None:
    j = job(nodes=3, labels={c.KUEUE_PRIORITY_LABEL: "high"})
    for i in range(3):
        meta = builders.build_worker_pod(j, i)["metadata"]
        assert meta["labels"][c.KUEUE_QUEUE_LABEL] == "team-a"
        assert meta["labels"][c.KUEUE_GROUP_LABEL] == "j-01234567"
        assert meta["labels"][c.KUEUE_INDEX_LABEL] == str(i)  # ranks in order under TAS
        assert meta["labels"][c.KUEUE_PRIORITY_LABEL] == "high"
        assert meta["annotations"][c.KUEUE_TOTAL_ANNOTATION] == "3"
    long = resolve(
        {
            **ddpjob("x" * 60, "ns"),
            "metadata": {
                "name": "x" * 60,
                "namespace": "ns",
                "uid": "0123456789ab",
                "labels": {c.KUEUE_QUEUE_LABEL: "q"},
            },
        }
    )
    assert long.queue is not None and len(long.queue.group) == 63


def test_without_the_queue_label_the_pods_carry_nothing_of_kueue() -> None:
    meta = builders.build_worker_pod(job(queue=None, nodes=2), 0)["metadata"]
    assert not [k for k in {**meta["labels"], **meta.get("annotations", {})} if "kueue" in k]


def test_observe_reads_the_gate_kueues_label_its_stop_and_the_mark() -> None:
    pod = builders.build_worker_pod(job(nodes=1), 0)
    pod["metadata"]["labels"][c.KUEUE_MANAGED_LABEL] = "true"
    pod["metadata"]["annotations"][c.KUEUE_RETRIABLE_ANNOTATION] = "false"
    pod["spec"]["schedulingGates"] = [{"name": c.KUEUE_GATE}]
    pod["status"] = {
        "conditions": [
            {
                "type": "TerminationTarget",
                "status": "True",
                "reason": "WorkloadEvicted",
                "message": "Preempted",
            }
        ]
    }
    seen = observe(pod)
    assert seen and seen.gated and seen.queue_managed and seen.unretriable
    assert seen.stopped == "WorkloadEvicted: Preempted"


def test_queued_while_gated_then_admitted() -> None:
    j, memory = job(nodes=2), Memory()
    step(j, memory, [])
    p = step(j, memory, group(2, phase="Pending", gated=True))
    queued = cond(memory.status, c.COND_QUEUED)
    assert queued["status"] == "True" and queued["reason"] == "WaitingForAdmission"
    assert "holds 2 of 2 workers" in queued["message"] and "LocalQueue team-a" in queued["message"]
    assert cond(memory.status, c.COND_ADMITTED)["status"] == "False"
    assert "WaitingForAdmission" in [e.reason for e in p.events]
    p = step(j, memory, group(2, phase="Running"))
    assert cond(memory.status, c.COND_QUEUED)["status"] == "False"
    assert cond(memory.status, c.COND_ADMITTED)["status"] == "True"
    assert "Admitted" in [e.reason for e in p.events] and memory.status["phase"] == "Running"


def workload(reason: str, message: str) -> dict:
    """A Kueue Workload as the API returns it, not admitted."""
    conditions = [
        {"type": "PodsReady", "status": "False", "reason": "WaitForStart", "message": "not all"},
        {"type": "QuotaReserved", "status": "False", "reason": reason, "message": message},
    ]
    return {"metadata": {"name": "j-01234567"}, "status": {"conditions": conditions}}


def test_the_workload_says_why_kueue_holds_the_group() -> None:
    assert kueue.holdup(None) is None
    assert kueue.holdup({"metadata": {}}) is None  # Kueue has not said anything yet
    admitted = workload("QuotaReserved", "Quota reserved in ClusterQueue gpus")
    admitted["status"]["conditions"][1]["status"] = "True"
    assert kueue.holdup(admitted) is None
    told = kueue.holdup(workload("Inadmissible", "LocalQueue gpsu doesn't exist"))
    assert told == kueue.Holdup("Inadmissible", "LocalQueue gpsu doesn't exist")
    assert told.misconfigured
    assert not kueue.holdup(workload("Pending", "insufficient unused quota")).misconfigured


def test_a_queue_that_does_not_exist_is_said_with_a_warning_not_left_waiting() -> None:
    j, memory = job("gpsu", nodes=2), Memory()
    step(j, memory, [])
    gated = group(2, phase="Pending", gated=True)
    p = step(j, memory, gated)
    assert p.requeue_after == kueue.RECHECK_UNTOLD  # the Workload comes after the pods
    told = kueue.holdup(workload("Inadmissible", "LocalQueue gpsu doesn't exist"))
    p = step(j, memory, gated, told)
    queued = cond(memory.status, c.COND_QUEUED)
    assert queued["status"] == "True" and queued["reason"] == "Inadmissible"
    assert "LocalQueue gpsu doesn't exist" in queued["message"], queued
    assert cond(memory.status, c.COND_ADMITTED)["reason"] == "Inadmissible"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "Inadmissible")]
    assert p.requeue_after == kueue.RECHECK_TOLD  # the user may create the queue
    p = step(j, memory, gated, told)
    assert p.events == []  # said once
    # The user creates the queue; Kueue now waits for quota: a wait, not a mistake.
    p = step(j, memory, gated, kueue.holdup(workload("Pending", "insufficient quota")))
    queued = cond(memory.status, c.COND_QUEUED)
    assert queued["reason"] == "WaitingForAdmission" and "insufficient quota" in queued["message"]
    assert kueue.waiting(j, gated) and not kueue.waiting(j, group(2, phase="Running"))


def test_pods_kueue_did_not_take_are_said_so_with_a_warning() -> None:
    j, memory = job(nodes=2), Memory()
    step(j, memory, [])
    p = step(j, memory, group(2, phase="Running", queue_managed=False))
    queued = cond(memory.status, c.COND_QUEUED)
    assert queued["reason"] == "NotManagedByKueue" and "ns" in queued["message"]
    assert [(e.type, e.reason) for e in p.events if e.reason == "NotManagedByKueue"] == [
        ("Warning", "NotManagedByKueue")
    ]
    p = step(j, memory, group(2, phase="Running", queue_managed=False))
    assert "NotManagedByKueue" not in [e.reason for e in p.events]  # said once


def test_an_eviction_is_no_failure_and_the_group_comes_back_in_the_same_attempt() -> None:
    j, memory = job(nodes=3, backoffLimit=0), Memory()
    step(j, memory, [])
    step(j, memory, group(3, phase="Running"))
    running = group(3, phase="Running")
    # Kueue marked and deleted worker-0 first; the others are not reached yet.
    stopped = replace(running[0], stopped="WorkloadEvicted: Preempted", deleting=True)
    p = step(j, memory, [stopped, *running[1:]])
    assert [d.name for d in p.delete] == ["j-worker-1", "j-worker-2"] and p.create == []
    queued = cond(memory.status, c.COND_QUEUED)
    assert queued["reason"] == "Evicted" and "Preempted" in queued["message"]
    assert ("Warning", "Evicted") in [(e.type, e.reason) for e in p.events]
    assert memory.status["restarts"] == 0 and memory.status["phase"] != "Failed"
    for pod in [stopped, *running[1:]]:
        memory.gone(pod, "0123456789ab")
    p = step(j, memory, [])
    assert p.create == [0, 1, 2] and memory.status["restarts"] == 0
    p = step(j, memory, group(3, phase="Pending", gated=True))
    assert p.create == [] and p.delete == []
    assert cond(memory.status, c.COND_QUEUED)["reason"] == "WaitingForAdmission"
    step(j, memory, group(3, phase="Running"))
    assert memory.status["phase"] == "Running" and memory.evicted == {}


def test_an_eviction_seen_only_as_the_pods_went_is_no_failure_either() -> None:
    j, memory = job(nodes=2, backoffLimit=0), Memory()
    step(j, memory, [])
    step(j, memory, group(2, phase="Running"))
    for pod in group(2, phase="Running", stopped="WorkloadEvicted: Preempted", deleting=True):
        memory.gone(pod, "0123456789ab")
    p = step(j, memory, [])
    assert p.create == [0, 1] and memory.status["phase"] != "Failed"
    assert cond(memory.status, c.COND_QUEUED)["reason"] == "Evicted"


def one_fails(j, memory: Memory, index: int, code: int):
    """A running group of two whose worker ``index`` exits with ``code``: the pass, the pods."""
    step(j, memory, [])
    pods = group(2, phase="Running")
    pods[index] = replace(pods[index], phase="Failed", exit_code=code)
    return step(j, memory, pods), pods


def test_a_worker_that_fails_under_kueue_still_restarts_the_group() -> None:
    memory = Memory()
    p, _ = one_fails(job(nodes=2, backoffLimit=2), memory, 1, 1)
    assert memory.status["restarts"] == 1 and len(p.delete) == 2


def test_a_job_over_marks_its_pods_so_that_kueue_ends_the_group() -> None:
    j, memory = job(nodes=2, backoffLimit=0), Memory()
    p, pods = one_fails(j, memory, 0, 3)
    assert memory.status["phase"] == "Failed"
    assert [m.name for m in p.mark_unretriable] == ["j-worker-0", "j-worker-1"]
    assert [d.name for d in p.delete] == ["j-worker-1"]  # cleanPodPolicy Running
    marked = [replace(x, unretriable=True) for x in pods]
    assert step(j, memory, marked).mark_unretriable == []
    assert plan(job(queue=None, nodes=2), memory.status, pods, NOW).mark_unretriable == []


def test_deleted_workers_that_ended_are_released_from_kueues_finalizer_and_no_others() -> None:
    j, memory = job(nodes=3), Memory()
    step(j, memory, [])
    fin = (c.KUEUE_FINALIZER,)
    ended = own("j-worker-0", 0, 0, "Failed", uid="p0", deleting=True, finalizers=fin, node="n")
    never_ran = own("j-worker-1", 1, 0, "Pending", uid="p1", deleting=True, finalizers=fin)
    still_running = own(
        "j-worker-2", 2, 0, "Running", uid="p2", deleting=True, finalizers=fin, node="n"
    )
    other = replace(ended, name="j-worker-0", finalizers=("example.com/hold",))
    p = step(j, memory, [ended, never_ran, still_running])
    assert [r.name for r in p.release] == ["j-worker-0", "j-worker-1"]
    assert step(j, memory, [other]).release == []
