"""MultiKueue, for real: two local clusters (hack/cluster/multikueue.sh), each with its own
control plane, kwok nodes, Kueue and operator. A DDPJob applied to the manager with
``spec.managedBy: kueue.x-k8s.io/multikueue`` gets its job-level Workload from the manager's
operator; Kueue admits it in a ClusterQueue whose admission check is MultiKueue's, which copies
the Workload and then the job to the worker cluster. The worker's operator runs it there once
that Workload is Admitted, with the node labels of its ResourceFlavor; MultiKueue mirrors the
worker copy's status back, and deletes it when the manager's is deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness import jobs, nodes, pods
from harness import kueue as kq
from harness.cluster import Cluster, wait_for
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

KUEUE = kq.KUEUE
QUEUE = "multi"
FLAVOR = "ddp-test-multikueue"
# What the worker's ResourceFlavor says its nodes carry (every fake node does): the worker's
# pods get it as a node selector, as Kueue's own integrations give it.
FLAVOR_LABELS = {"type": "kwok"}
QUOTA = [("cpu", "100"), ("memory", "1Ti")]


@pytest.fixture
def queues(cluster: Cluster, multikueue: Cluster, namespace: str) -> Iterator[str]:
    """The test's namespace on both clusters, and LocalQueue ``multi`` in it on both: on the
    manager in a ClusterQueue with MultiKueue's admission check, on the worker in a plain one."""
    ns, worker = namespace, multikueue
    worker.core.create_namespace(nodes.fake_nodes_namespace(ns))
    wait_for(lambda: worker.core.list_namespaced_service_account(ns).items, what="worker's sa")
    kq.apply(cluster, "ResourceFlavor", FLAVOR, {})
    kq.apply(worker, "ResourceFlavor", FLAVOR, {"nodeLabels": FLAVOR_LABELS})
    kq.apply(cluster, "ClusterQueue", ns, kq.cluster_queue(ns, FLAVOR, QUOTA, ["ddp-multikueue"]))
    kq.apply(worker, "ClusterQueue", ns, kq.cluster_queue(ns, FLAVOR, QUOTA))
    for where in (cluster, worker):
        kq.apply(where, "LocalQueue", QUEUE, {"clusterQueue": ns}, ns)
    try:
        yield ns
    finally:
        for where in (cluster, worker):
            where.kubectl("delete", "clusterqueue", ns, "--wait=false", check=False)
        worker.core.delete_namespace(ns, propagation_policy="Background")


def sent_job(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    job = ddpjob(name, ns, managedBy="kueue.x-k8s.io/multikueue", **spec)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    return job


def workload_of(cluster: Cluster, ns: str, job: dict[str, Any]) -> dict[str, Any]:
    name = f"{job['metadata']['name']}-{job['metadata']['uid'][:8]}"
    return cluster.custom.get_namespaced_custom_object(*KUEUE, ns, "workloads", name)


def status_of(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return (jobs.get(cluster, ns, name) or {}).get("status") or {}


def test_a_job_applied_to_the_manager_runs_on_the_worker_and_its_status_comes_back(
    cluster: Cluster, multikueue: Cluster, queues: str
) -> None:
    ns, worker = queues, multikueue
    jobs.apply(cluster, sent_job("far", ns, backoffLimit=2))
    # The manager: the job's Workload, the job its controller; no pods, no Service.
    manager_job = wait_for(lambda: jobs.get(cluster, ns, "far"), what="the manager's job")
    workload = wait_for(lambda: _workload(cluster, ns, manager_job), what="its Workload")
    owner = workload["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "DDPJob",
        manager_job["metadata"]["uid"],
        True,
    )
    assert workload["spec"]["podSets"][0]["count"] == 2
    # The worker: MultiKueue's copy, without managedBy, runs once its Workload is admitted.
    running = jobs.wait_running(worker, ns, "far", 2, timeout=90)
    copy = jobs.get(worker, ns, "far")
    assert "managedBy" not in copy["spec"], copy["spec"]
    for pod in running:
        assert pod["spec"]["nodeSelector"].items() >= FLAVOR_LABELS.items(), pod["spec"]
        kueue_labels = [k for k in pod["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]
        assert kueue_labels == [], kueue_labels  # admitted as a job, not as Kueue's pod group
    prebuilt = copy["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"]
    remote = worker.custom.get_namespaced_custom_object(*KUEUE, ns, "workloads", prebuilt)
    assert remote["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
    assert pods.list_pods(cluster, ns) == []  # nothing runs on the manager
    wait_for(lambda: status_of(cluster, ns, "far").get("phase") == "Running", what="Running here")
    # A worker fails: the group restarts there, and the manager's copy shows it.
    pods.finish(worker, ns, running[1]["metadata"]["name"], 1, uid=running[1]["metadata"]["uid"])
    again = jobs.wait_running(worker, ns, "far", 2, attempt=1, timeout=90)
    wait_for(lambda: status_of(cluster, ns, "far").get("restarts") == 1, what="restarts here")
    first = status_of(cluster, ns, "far")["firstFailure"]
    assert (first["worker"], first["exitCode"]) == (1, 1), first
    for pod in again:
        pods.finish(worker, ns, pod["metadata"]["name"], 0, uid=pod["metadata"]["uid"])
    wait_for(lambda: status_of(cluster, ns, "far").get("phase") == "Succeeded", what="Succeeded")
    done = jobs.get(cluster, ns, "far")
    assert jobs.condition(done, "Succeeded")["status"] == "True"
    assert jobs.condition(done, "Admitted")["status"] == "True"
    # The Workloads are Finished: the quota is free on both clusters.
    wait_for(
        lambda: _true(_workload(cluster, ns, manager_job), "Finished"), what="manager's Finished"
    )


def test_deleting_the_managers_job_deletes_the_workers_copy_and_pods(
    cluster: Cluster, multikueue: Cluster, queues: str
) -> None:
    ns, worker = queues, multikueue
    jobs.apply(cluster, sent_job("gone", ns))
    jobs.wait_running(worker, ns, "gone", 2, timeout=90)
    cluster.kubectl("delete", "ddpjob", "gone", "-n", ns)
    wait_for(
        lambda: jobs.get(worker, ns, "gone") is None, timeout=90, what="the worker's copy gone"
    )
    wait_for(lambda: not jobs.workers(worker, ns, "gone"), timeout=60, what="its pods gone")
    assert worker.custom.list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"] == []


def _workload(cluster: Cluster, ns: str, job: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return workload_of(cluster, ns, job)
    except Exception:
        return None


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(x["type"] == type_ and x["status"] == "True" for x in conds)


def test_a_job_evicted_on_the_manager_stops_on_the_worker_and_runs_again_when_readmitted(
    cluster: Cluster, multikueue: Cluster, queues: str
) -> None:
    """The manager's Workload deactivated: Kueue evicts it there, and MultiKueue the worker's;
    the worker's pods go with no restart counted, each operator gives its Workload's quota
    back; active again, the job is sent again and runs."""
    ns, worker = queues, multikueue
    jobs.apply(cluster, sent_job("away", ns))
    jobs.wait_running(worker, ns, "away", 2, timeout=90)
    manager_job = jobs.get(cluster, ns, "away")
    name = workload_of(cluster, ns, manager_job)["metadata"]["name"]
    patch = {"spec": {"active": False}}
    cluster.custom.patch_namespaced_custom_object(*KUEUE, ns, "workloads", name, patch)
    wait_for(
        lambda: not _true(_workload(cluster, ns, manager_job), "QuotaReserved"),
        timeout=90,
        what="the manager's quota given back",
    )
    wait_for(
        lambda: not jobs.workers(worker, ns, "away"), timeout=90, what="the worker's pods gone"
    )
    patch = {"spec": {"active": True}}
    cluster.custom.patch_namespaced_custom_object(*KUEUE, ns, "workloads", name, patch)
    running = jobs.wait_running(worker, ns, "away", 2, timeout=120)
    for pod in running:
        pods.finish(worker, ns, pod["metadata"]["name"], 0, uid=pod["metadata"]["uid"])
    wait_for(
        lambda: status_of(cluster, ns, "away").get("phase") == "Succeeded",
        timeout=90,
        what="Succeeded on the manager",
    )
    assert status_of(cluster, ns, "away")["restarts"] == 0
