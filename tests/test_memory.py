"""Unit tests of a job loop's memory, with the planner: a worker whose pod was created and
deleted between two passes is a failure, a pod the loop deleted is not, and a status written
by an earlier operator that landed late is taken."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from ddp_operator.decide.memory import Memory
from ddp_operator.decide.reconcile import plan
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)
own = functools.partial(WorkerPod, owner_uid="u")


def job(**spec):
    body = ddpjob("j", "ns", **spec)
    body["metadata"]["uid"] = "u"
    return resolve(body)


def step(j, memory: Memory, observed: list[WorkerPod]):
    """One pass as the runner makes it: plan, remember, take the status as written."""
    p = plan(j, memory.status, observed, NOW, 1, None, memory.seen)
    memory.passed(p.own, p.attempt, j.suspend)
    memory.deleting(p.delete + p.force_delete)
    memory.status.update(p.status)
    return p


def test_a_pod_created_and_deleted_between_two_passes_is_a_failure_not_recreated() -> None:
    j, memory = job(nodes=2), Memory()
    assert step(j, memory, []).create == [0, 1]
    # worker-1 appears, then is deleted by someone before any pass saw it
    memory.gone(own("j-worker-1", 1, 0, uid="p1"), "u")
    p = step(j, memory, [own("j-worker-0", 0, 0, uid="p0")])
    assert p.create == [] and memory.status["restarts"] == 1
    assert any("j-worker-1 was deleted" in c["message"] for c in memory.status["conditions"])


def test_without_that_knowledge_the_missing_worker_would_be_created_again() -> None:
    j, memory = job(nodes=2), Memory()
    step(j, memory, [])
    p = step(j, memory, [own("j-worker-0", 0, 0, uid="p0")])
    assert p.create == [1] and memory.attempt == 0


def test_pods_the_loop_deleted_are_no_failure_when_they_go() -> None:
    j, memory = job(nodes=2, suspend=True), Memory()
    running = [own(f"j-worker-{i}", i, 0, "Running", uid=f"p{i}") for i in range(2)]
    p = step(j, memory, running)
    assert [d.uid for d in p.delete] == ["p0", "p1"]
    for pod in running:  # their DELETED events come after the job was resumed
        memory.gone(pod, "u")
    p = step(job(nodes=2), memory, [])
    assert p.create == [0, 1] and memory.attempt == 0 and memory.removed == set()


def test_a_foreign_pod_gone_means_nothing() -> None:
    j, memory = job(nodes=2), Memory()
    step(j, memory, [])
    memory.gone(WorkerPod("j-worker-1", 1, 0, uid="x", owner_uid="other"), "u")
    assert step(j, memory, []).create == [0, 1] and memory.attempt == 0


def test_a_later_status_written_by_an_earlier_operator_is_taken() -> None:
    memory = Memory({"restarts": 1, "phase": "Running"})
    assert not memory.adopt({"restarts": 1, "phase": "Pending"})  # an echo of an older write
    assert memory.adopt({"restarts": 2, "phase": "Restarting"})
    assert memory.attempt == 2
    assert memory.adopt({"restarts": 2, "phase": "Failed"})
    assert not memory.adopt({"restarts": 2, "phase": "Running"})
    assert memory.status["phase"] == "Failed"


def test_a_pod_created_lately_is_not_asked_for_again_until_seen_or_late() -> None:
    memory = Memory()
    keys = {0: ("j-worker-0", 0), 1: ("j-worker-1", 0)}
    assert memory.unasked(keys, 100.0, 10.0) == [0, 1]
    memory.requested.update(dict.fromkeys(keys.values(), 100.0))
    assert memory.unasked(keys, 105.0, 10.0) == []  # the watch has yet to show them
    assert memory.unasked(keys, 110.0, 10.0) == [0, 1]  # never shown: asked for again
    memory.passed([own(name="j-worker-0", index=0, attempt=0)], 0, False)
    assert set(memory.requested) == {("j-worker-1", 0)}  # seen: forgotten
    memory.passed([], 1, False)
    assert memory.requested == {}  # a later attempt: the earlier one's are forgotten


def test_an_in_place_pod_told_a_later_attempt_that_vanishes_is_a_replacement() -> None:
    """Issue 68: pods seen were keyed by the attempt they were created in, losses by the one
    they run; an elastic job's in-place pod created in 0 and told 2 that vanished (a force
    delete: never seen terminating) recorded no failure, was created again uncounted and so
    bypassed maxReplacements. Both ways it can go: its DELETED event seen, or not at all."""
    body = ddpjob("j", "ns", nodes=3, minNodes=2, maxNodes=3)
    body["metadata"]["uid"] = "u"
    j = resolve(body)
    told = functools.partial(own, phase="Running", in_place=True, told=2, restarted=2)
    told = functools.partial(told, watching=True, started=True, trainer_running=True)
    group = [told(f"j-worker-{i}", i, 0, uid=f"p{i}") for i in range(3)]
    for deleted_event in (True, False):
        memory = Memory({"restarts": 2, "createdInAttempt": 0})
        step(j, memory, group)
        assert memory.attempt == 2 and memory.status["replacements"] == 0
        if deleted_event:
            memory.gone(group[2], "u")
        p = step(j, memory, group[:2])
        assert memory.status["replacements"] == 1, deleted_event
        assert memory.status["replacing"] == [{"index": 2, "uid": ""}], deleted_event
        assert memory.status["restarts"] == 2 and p.create == [2], deleted_event  # its successor
