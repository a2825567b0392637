"""Unit tests of the job-level Kueue Workload, the pure parts (``decide/kueue_workload``,
``manifests/kueue_workload``): what a Workload says, the job as it lets it run, the status
patches that give back its quota or finish it, adopting a prebuilt one, and the Workload made
for a job MultiKueue runs elsewhere. Real Kueue: test_kueue_prebuilt.py, test_multikueue.py,
test_kueue_topology.py."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import pytest

from ddp_operator.decide import kueue_workload as kw
from ddp_operator.decide.failures import NameConflict
from ddp_operator.decide.memory import Memory
from ddp_operator.decide.reconcile import plan
from ddp_operator.manifests import builders
from ddp_operator.manifests import kueue_workload as manifest
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve, sent_away
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)
UID = "0123456789ab"
own = functools.partial(WorkerPod, owner_uid=UID)


def body(prebuilt: str | None = "wl", annotations: dict | None = None, **spec) -> dict:
    b = ddpjob("j", "ns", **spec)
    b["metadata"]["uid"] = UID
    b["metadata"]["labels"] = {c.KUEUE_QUEUE_LABEL: "q"}
    b["metadata"]["annotations"] = {**({c.KUEUE_PREBUILT: prebuilt} if prebuilt else {})}
    if annotations:
        b["spec"]["template"]["metadata"] = {"annotations": annotations}
    return b


def cond(type_: str, status: bool, reason: str = "R", message: str = "m") -> dict:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def workload(*conds: dict, flavors: dict | None = None, topology: bool = False) -> dict:
    status: dict = {"conditions": list(conds)}
    if flavors is not None:
        assignment: dict = {"name": "workers", "flavors": flavors, "count": 2}
        if topology:
            assignment["topologyAssignment"] = {"levels": ["h"], "slices": []}
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [assignment]}
    meta = {"name": "wl", "resourceVersion": "7", "generation": 1, "uid": "w1"}
    return {"metadata": meta, "spec": {}, "status": status}


ADMITTED = (cond("QuotaReserved", True), cond("Admitted", True, "Admitted", "ok"))


def test_a_job_naming_a_prebuilt_workload_is_admitted_through_it_and_its_pods_carry_no_group():
    j = resolve(body())
    assert j.queue is not None and j.queue.workload == "wl" and j.queue.group == "wl"
    labelled = body(prebuilt=None)
    labelled["metadata"]["labels"][c.KUEUE_PREBUILT] = "old"  # Kueue before 0.19: a label
    assert resolve(labelled).queue.workload == "old"
    labels = builders.build_worker_pod(j, 0)["metadata"]["labels"]
    assert not [k for k in labels if k.startswith("kueue.x-k8s.io/")], labels
    plain = resolve(body(prebuilt=None))
    assert plain.queue.workload is None  # Kueue's pod group, as before
    assert builders.build_worker_pod(plain, 0)["metadata"]["labels"][c.KUEUE_GROUP_LABEL]


def test_what_a_workload_says() -> None:
    missing = kw.read("wl", None)
    assert (missing.admitted, missing.reason) == (False, "WorkloadMissing")
    pending = kw.read("wl", workload(cond("QuotaReserved", False, "Pending", "no quota")))
    assert (pending.admitted, pending.reason, pending.message) == (False, "Pending", "no quota")
    checking = kw.read(
        "wl", workload(cond("QuotaReserved", True), cond("Admitted", False, "Checks", "waits"))
    )
    assert (checking.admitted, checking.reason) == (False, "Checks")
    admitted = kw.read("wl", workload(*ADMITTED, flavors={"cpu": "f1", "nvidia.com/gpu": "f2"}))
    assert admitted.admitted and admitted.flavors == ("f1", "f2") and admitted.version == "7"
    evicted = kw.read(
        "wl", workload(*ADMITTED, cond("Evicted", True, "Preempted", "by high"), flavors={})
    )
    assert (evicted.admitted, evicted.evicted, evicted.reason) == (False, True, "Preempted")
    assert kw.read("wl", workload(*ADMITTED, flavors={"cpu": "f"}, topology=True)).topology


def test_the_job_is_held_until_admitted_then_runs_where_its_flavors_say() -> None:
    j = resolve(body())
    held = kw.as_admitted(j, kw.read("wl", None))
    assert held.suspend
    found = kw.read("wl", workload(*ADMITTED, flavors={"cpu": "f1", "memory": "f2"}))
    toleration = {"key": "pool", "operator": "Exists", "effect": "NoSchedule"}
    flavors = {
        "f1": {"spec": {"nodeLabels": {"pool": "a"}, "tolerations": [toleration]}},
        "f2": {"spec": {"nodeLabels": {"zone": "z"}, "tolerations": [toleration]}},
    }
    running = kw.as_admitted(j, kw.placed(found, flavors))
    pod = builders.build_worker_pod(running, 1)
    assert pod["spec"]["nodeSelector"] == {"pool": "a", "zone": "z"}
    assert pod["spec"]["tolerations"].count(toleration) == 1, pod["spec"]["tolerations"]
    assert not running.suspend and "schedulingGates" not in pod["spec"]


def test_pods_of_a_topology_assignment_are_gated_for_kueue_to_place() -> None:
    j = resolve(body(annotations={c.KUEUE_REQUIRED_TOPOLOGY: "block"}))
    found = kw.read("wl", workload(*ADMITTED, flavors={"cpu": "f"}, topology=True))
    pod = builders.build_worker_pod(kw.as_admitted(j, found), 2)
    assert pod["spec"]["schedulingGates"] == [{"name": c.KUEUE_TOPOLOGY_GATE}]
    assert pod["metadata"]["annotations"][c.KUEUE_WORKLOAD_ANNOTATION] == "wl"
    assert c.KUEUE_UNCONSTRAINED_TOPOLOGY not in pod["metadata"]["annotations"]
    assert pod["metadata"]["labels"][c.KUEUE_POD_SET_LABEL] == c.KUEUE_POD_SET
    assert pod["metadata"]["labels"][c.LABEL_INDEX] == "2"  # Kueue ranks by it
    free = builders.build_worker_pod(kw.as_admitted(resolve(body()), found), 0)
    assert free["metadata"]["annotations"][c.KUEUE_UNCONSTRAINED_TOPOLOGY] == "true"


def step(j, found: kw.Admission, memory: Memory, observed: list[WorkerPod]):
    """One pass as the runner makes it."""
    run = kw.as_admitted(j, found)
    p = plan(run, memory.status, observed, NOW, 1, None, memory.seen, memory.evicted,
             admission=found)  # fmt: skip
    memory.passed(p.own, p.attempt, run.suspend)
    memory.deleting(p.delete + p.force_delete)
    memory.status.update(p.status)
    return p


def status_cond(status: dict, type_: str) -> dict:
    return next(x for x in status["conditions"] if x["type"] == type_)


def test_an_evicted_job_stops_without_a_failure_and_runs_again_once_readmitted() -> None:
    j = resolve(body(nodes=2))
    memory = Memory()
    waiting = step(j, kw.read("wl", workload(cond("QuotaReserved", False, "Pending", "quota"))),
                   memory, [])  # fmt: skip
    assert not waiting.create and waiting.status["phase"] == "Suspended"
    assert status_cond(waiting.status, "Queued")["reason"] == "WaitingForAdmission"
    assert "quota" in status_cond(waiting.status, "Queued")["message"]
    assert waiting.requeue_after == kw.RECHECK  # Kueue's admission wakes no job event
    admitted = kw.read("wl", workload(*ADMITTED, flavors={}))
    created = step(j, admitted, memory, [])
    assert len(created.create) == 2
    pods = [own(f"j-worker-{i}", i, 0, uid=f"p{i}", phase="Running", node="n") for i in (0, 1)]
    running = step(j, admitted, memory, pods)
    assert status_cond(running.status, "Admitted")["status"] == "True"
    # Its Workload is read again within ADMITTED_RECHECK, should the watch miss the eviction
    # (seen in CI: kopf stopped serving Workloads while discovery did not list their CRD).
    assert running.requeue_after is not None and running.requeue_after <= kw.ADMITTED_RECHECK
    evicted = kw.read("wl", workload(*ADMITTED, cond("Evicted", True, "Preempted", "by high")))
    stopped = step(j, evicted, memory, pods)
    assert {p.name for p in stopped.delete} == {"j-worker-0", "j-worker-1"}
    assert status_cond(stopped.status, "Queued")["reason"] == "Evicted"
    assert stopped.status["restarts"] == 0
    assert kw.release(evicted, 2, NOW) is None  # not while its pods are still there
    patch = kw.release(evicted, 0, NOW)
    assert patch["metadata"] == {"resourceVersion": "7"} and patch["status"]["admission"] is None
    by_type = {x["type"]: x for x in patch["status"]["conditions"]}
    assert by_type["QuotaReserved"]["status"] == "False"
    assert by_type["Admitted"]["status"] == "False"
    assert (by_type["Requeued"]["status"], by_type["Requeued"]["reason"]) == ("True", "Preempted")
    assert by_type["Evicted"]["status"] == "True"  # every other condition is kept
    gone = step(j, evicted, memory, [])
    again = step(j, admitted, memory, [])
    assert len(again.create) == 2 and again.status["restarts"] == 0, (gone.status, again.status)


def test_the_workload_is_finished_once_with_the_jobs_outcome() -> None:
    found = kw.read("wl", workload(*ADMITTED, flavors={}))
    patch = kw.finish(found, True, "all workers exited 0", NOW)
    finished = next(x for x in patch["status"]["conditions"] if x["type"] == "Finished")
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    assert len(patch["status"]["conditions"]) == 3 and "admission" not in patch["status"]
    done = kw.read("wl", workload(*ADMITTED, cond("Finished", True, "Succeeded")))
    assert kw.finish(done, True, "", NOW) is None and not done.admitted
    assert kw.finish(kw.read("wl", None), False, "", NOW) is None


def test_a_prebuilt_workload_is_adopted_unless_another_object_controls_it() -> None:
    j = resolve(body())
    patch = kw.adopt(j, workload())
    (ref,) = patch["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == (c.KIND, UID, True)
    assert patch["metadata"]["resourceVersion"] == "7"
    mine = workload()
    mine["metadata"]["ownerReferences"] = [ref]
    assert kw.adopt(j, mine) is None
    theirs = workload()
    theirs["metadata"]["ownerReferences"] = [
        {"kind": "JobSet", "name": "x", "uid": "other", "controller": True}
    ]
    with pytest.raises(NameConflict, match="JobSet x"):
        kw.adopt(j, theirs)


def test_the_workload_made_for_a_job_multikueue_runs_elsewhere() -> None:
    sent = body(
        prebuilt=None,
        annotations={c.KUEUE_PREFERRED_TOPOLOGY: "rack"},
        managedBy=c.MULTIKUEUE,
        nodes=3,
        restartStrategy="InPlace",
    )
    assert sent_away(sent) and not sent_away(body())
    j = resolve(sent)
    wl = manifest.build(j)
    assert wl["metadata"]["name"] == "j-01234567" and wl["spec"]["queueName"] == "q"
    (ref,) = wl["metadata"]["ownerReferences"]
    assert (ref["uid"], ref["controller"]) == (UID, True)
    (pod_set,) = wl["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == (c.KUEUE_POD_SET, 3)
    assert pod_set["topologyRequest"] == {"preferred": "rack", "podIndexLabel": c.LABEL_INDEX}
    # Kueue counts every container the operator adds (the in-place watch) with the user's.
    names = [ct["name"] for ct in pod_set["template"]["spec"]["containers"]]
    assert c.WATCH_CONTAINER in names, names
    assert set(pod_set["template"]["metadata"]) == {"labels", "annotations"}
