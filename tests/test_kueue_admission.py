"""Kueue, for real (hack/cluster/kueue.sh: its manager built from its Go module, its webhooks
called by the API server): DDPJobs labelled with a LocalQueue run as Kueue pod groups, on the
test's own 4 fake nodes of 8 GPUs, in a ClusterQueue of 32 GPUs.

Two jobs of 3 nodes x 8 GPUs: Kueue admits one whole and holds every worker of the other gated
(none placed, no GPU held) until the first is over; a preempted group is no failure and comes back
in the same attempt; a job that failed for good lets Kueue end its group and free the quota.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from harness import jobs, pods
from harness import kueue as kq
from harness.cluster import Cluster, wait_for
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GATE = "kueue.x-k8s.io/admission"
KUEUE = kq.KUEUE


@pytest.fixture
def queue(cluster: Cluster, kueue: None, pool: str) -> Iterator[str]:
    """A ClusterQueue of the pool's 32 GPUs for this test's namespace (preempting lower
    priorities), its LocalQueue ``gpus``, and the priorities low and high."""
    ns = pool
    kq.apply(cluster, "ResourceFlavor", "ddp-test-flavor", {})
    for name, value in (("ddp-test-low", 100), ("ddp-test-high", 1000)):
        cluster.kubectl(
            "apply",
            "--server-side",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "/".join(KUEUE),
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                }
            ),
        )
    resources = [("cpu", "1000"), ("memory", "10Ti"), ("nvidia.com/gpu", "32")]
    spec = kq.cluster_queue(ns, "ddp-test-flavor", resources)
    spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    kq.apply(cluster, "ClusterQueue", ns, spec)
    kq.apply(cluster, "LocalQueue", "gpus", {"clusterQueue": ns}, ns)
    wait_for(
        lambda: (
            cluster.custom.get_cluster_custom_object_status(*KUEUE, "clusterqueues", ns)
            .get("status", {})
            .get("conditions")
        ),
        what="the ClusterQueue's status",
    )
    try:
        yield ns
    finally:
        cluster.kubectl("delete", "clusterqueue", ns, "--wait=false", check=False)


def queued_job(name: str, ns: str, priority: str | None = None, **spec: Any) -> dict[str, Any]:
    job = ddpjob(name, ns, nodes=3, accelerator=pods.GPUS, template=pods.on_pool(ns), **spec)
    job["metadata"]["labels"] = {
        QUEUE_LABEL: "gpus",
        **({PRIORITY_LABEL: priority} if priority else {}),
    }
    return job


def bound(cluster: Cluster, ns: str, job: str) -> list[str]:
    return sorted(
        p["metadata"]["name"] for p in jobs.workers(cluster, ns, job) if p["spec"].get("nodeName")
    )


def gated(cluster: Cluster, ns: str, job: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in jobs.workers(cluster, ns, job)
        if any(
            g["name"] == "kueue.x-k8s.io/admission" for g in p["spec"].get("schedulingGates") or []
        )
    )


def queued(cluster: Cluster, ns: str, name: str) -> dict:
    """The job's Queued condition (empty until it has one)."""
    return jobs.condition(jobs.get(cluster, ns, name), "Queued") or {"reason": "", "message": ""}


def admitted(cluster: Cluster, ns: str, name: str) -> dict:
    job = jobs.wait_condition(cluster, ns, name, "Admitted")
    wait_for(lambda: len(bound(cluster, ns, name)) == 3, what=f"{name}'s 3 workers bound")
    return job


def finish_all(cluster: Cluster, ns: str, name: str, code: int = 0, attempt: int = 0) -> None:
    for pod in jobs.wait_running(cluster, ns, name, 3, attempt=attempt):
        pods.finish(cluster, ns, pod["metadata"]["name"], code, uid=pod["metadata"]["uid"])


def finish_until_succeeded(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    """Finish the job's Running workers until it has Succeeded; returns it. Once resumed, the
    first group Kueue admits may be stopped at once ("Missing Workload; unable to restore pod
    templates": the Workload of before the suspension goes as the new pods come) and recreated
    by the operator: the new pods are finished in their turn."""
    finished: set[str] = set()

    def probe() -> dict[str, Any] | None:
        job = jobs.get(cluster, ns, name)
        cond = jobs.condition(job, "Succeeded")
        if cond and cond["status"] == "True":
            return job
        for pod in jobs.workers(cluster, ns, name):
            uid = pod["metadata"]["uid"]
            if uid in finished or pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["status"].get("phase") == "Running":
                try:
                    pods.finish(cluster, ns, pod["metadata"]["name"], 0, uid=uid)
                except ApiException as exc:  # replaced meanwhile: its successor comes next
                    if exc.status not in (404, 409, 422):
                        raise
                finished.add(uid)
        return None

    return wait_for(probe, timeout=120, what=f"{name} Succeeded", slowest=0.5)


def test_kueue_admits_one_job_whole_and_holds_the_other_until_it_is_over(
    cluster: Cluster, queue: str
) -> None:
    ns = queue
    jobs.apply(cluster, queued_job("a", ns, backoffLimit=0))
    admitted(cluster, ns, "a")
    jobs.apply(cluster, queued_job("b", ns))
    job = jobs.wait_condition(cluster, ns, "b", "Queued")
    cond = jobs.condition(job, "Queued")
    assert cond["reason"] == "WaitingForAdmission" and "LocalQueue gpus" in cond["message"], cond
    wait_for(lambda: len(gated(cluster, ns, "b")) == 3, what="b's 3 workers gated")
    assert bound(cluster, ns, "b") == []  # no GPU held by the waiting job
    assert jobs.condition(jobs.get(cluster, ns, "b"), "Admitted")["status"] == "False"
    group = jobs.get(cluster, ns, "b")["metadata"]["uid"][:8]
    workload = cluster.custom.get_namespaced_custom_object(*KUEUE, ns, "workloads", f"b-{group}")
    assert workload["spec"]["podSets"], workload
    # Kueue's own word on why, from the Workload, is in the condition.
    wait_for(lambda: "quota" in queued(cluster, ns, "b")["message"], what="Kueue's word in b's")
    assert "nvidia.com/gpu" in queued(cluster, ns, "b")["message"]
    # a fails for good (backoffLimit 0): it marks its pods, Kueue ends the group, b is admitted.
    pod = jobs.wait_running(cluster, ns, "a", 3)[1]
    pods.finish(cluster, ns, pod["metadata"]["name"], 3, uid=pod["metadata"]["uid"])
    jobs.wait_condition(cluster, ns, "a", "Failed")
    admitted(cluster, ns, "b")
    finish_all(cluster, ns, "b")
    jobs.wait_condition(cluster, ns, "b", "Succeeded")
    assert jobs.get(cluster, ns, "b")["status"]["restarts"] == 0


def test_a_queue_name_with_a_typo_is_said_at_once_and_the_job_runs_once_it_exists(
    cluster: Cluster, queue: str
) -> None:
    ns = queue
    job = queued_job("t", ns)
    job["metadata"]["labels"][QUEUE_LABEL] = "gpsu"  # no such LocalQueue
    jobs.apply(cluster, job)
    wait_for(lambda: queued(cluster, ns, "t")["reason"] == "Inadmissible", what="t to say why")
    said = queued(cluster, ns, "t")
    assert "LocalQueue gpsu doesn't exist" in said["message"], said
    warning = jobs.wait_event(cluster, ns, "t", "Inadmissible")[-1]
    assert warning["type"] == "Warning" and "gpsu" in warning["message"], warning
    assert bound(cluster, ns, "t") == []
    # The user creates the queue the job names: Kueue admits it, and it runs.
    kq.apply(cluster, "LocalQueue", "gpsu", {"clusterQueue": ns}, ns)
    admitted(cluster, ns, "t")
    finish_all(cluster, ns, "t")
    jobs.wait_condition(cluster, ns, "t", "Succeeded")


def test_a_preempted_group_is_no_failure_and_comes_back_in_the_same_attempt(
    cluster: Cluster, queue: str
) -> None:
    ns = queue
    jobs.apply(cluster, queued_job("low", ns, "ddp-test-low", backoffLimit=0))
    admitted(cluster, ns, "low")
    jobs.apply(cluster, queued_job("high", ns, "ddp-test-high"))
    admitted(cluster, ns, "high")  # Kueue preempted low to make room
    jobs.wait_event(cluster, ns, "low", "Evicted")
    low = jobs.wait_condition(cluster, ns, "low", "Queued")
    assert jobs.condition(low, "Queued")["reason"] in ("Evicted", "WaitingForAdmission")
    wait_for(lambda: len(gated(cluster, ns, "low")) == 3, what="low's workers back, gated")
    low = jobs.get(cluster, ns, "low")
    assert low["status"]["restarts"] == 0 and low["status"]["phase"] != "Failed", low["status"]
    finish_all(cluster, ns, "high")
    jobs.wait_condition(cluster, ns, "high", "Succeeded")
    admitted(cluster, ns, "low")
    finish_all(cluster, ns, "low")
    low = jobs.wait_condition(cluster, ns, "low", "Succeeded")
    assert low["status"]["restarts"] == 0


def test_a_suspended_job_leaves_the_queue_and_rejoins_it_when_resumed(
    cluster: Cluster, queue: str
) -> None:
    ns = queue
    jobs.apply(cluster, queued_job("s", ns))
    admitted(cluster, ns, "s")
    cluster.custom.patch_namespaced_custom_object(
        "ddp-operator.io", "v1alpha1", ns, "ddpjobs", "s", {"spec": {"suspend": True}}
    )
    jobs.wait_phase(cluster, ns, "s", "Suspended")
    wait_for(lambda: jobs.workers(cluster, ns, "s") == [], what="s's pods gone")
    cluster.custom.patch_namespaced_custom_object(
        "ddp-operator.io", "v1alpha1", ns, "ddpjobs", "s", {"spec": {"suspend": False}}
    )
    admitted(cluster, ns, "s")
    assert finish_until_succeeded(cluster, ns, "s")["status"]["restarts"] == 0


def test_a_worker_failure_restarts_the_group_under_kueue(cluster: Cluster, queue: str) -> None:
    ns = queue
    jobs.apply(cluster, queued_job("r", ns, backoffLimit=1))
    admitted(cluster, ns, "r")
    pod = jobs.wait_running(cluster, ns, "r", 3)[2]
    pods.finish(cluster, ns, pod["metadata"]["name"], 1, uid=pod["metadata"]["uid"])
    jobs.wait_event(cluster, ns, "r", "WorkerFailed")
    # The same workers, attempt 1, in the same Kueue group: admitted again and run.
    for i, worker in enumerate(jobs.wait_running(cluster, ns, "r", 3, attempt=1)):
        assert worker["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"].startswith("r-")
        assert worker["metadata"]["labels"]["kueue.x-k8s.io/pod-group-pod-index"] == str(i)
    finish_all(cluster, ns, "r", attempt=1)
    job = jobs.wait_condition(cluster, ns, "r", "Succeeded")
    assert job["status"]["restarts"] == 1


def test_a_deleted_job_leaves_no_pod_behind_under_kueue(cluster: Cluster, queue: str) -> None:
    ns = queue
    jobs.apply(cluster, queued_job("d", ns))
    admitted(cluster, ns, "d")
    cluster.custom.delete_namespaced_custom_object(
        "ddp-operator.io", "v1alpha1", ns, "ddpjobs", "d"
    )
    # Kueue's finalizer would keep the pods Terminating while it waits for replacements; the
    # operator marks them so that Kueue ends the group and lets them go.
    wait_for(lambda: jobs.workers(cluster, ns, "d") == [], what="d's pods gone")
    jobs.apply(cluster, queued_job("e", ns))  # and the quota is free again
    admitted(cluster, ns, "e")
