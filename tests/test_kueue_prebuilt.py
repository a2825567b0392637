"""A job-level Kueue Workload, for real (Kueue's manager from hack/cluster/kueue.sh): a DDPJob
that names a prebuilt Workload (``kueue.x-k8s.io/prebuilt-workload-name``, as MultiKueue's copy
of a job on a worker cluster does) waits for it, makes it its own, runs once Kueue admits it,
stops without a failure when Kueue evicts it (giving the quota back, so that Kueue queues it
again), and finishes it when the job is over. One another object controls is never used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from harness import jobs, pods
from harness import kueue as kq
from harness.cluster import Cluster, wait_for
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

KUEUE = kq.KUEUE
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
FLAVOR = "ddp-test-prebuilt"
FLAVOR_LABELS = {"type": "kwok"}  # every fake node has it


@pytest.fixture
def queue(cluster: Cluster, kueue: None, namespace: str) -> Iterator[str]:
    """LocalQueue ``jobs`` in a ClusterQueue of 8 CPUs for this test's namespace, whose flavor
    names a node label."""
    ns = namespace
    kq.apply(cluster, "ResourceFlavor", FLAVOR, {"nodeLabels": FLAVOR_LABELS})
    kq.apply(cluster, "ClusterQueue", ns, kq.cluster_queue(ns, FLAVOR, [("cpu", "8")]))
    kq.apply(cluster, "LocalQueue", "jobs", {"clusterQueue": ns}, ns)
    try:
        yield ns
    finally:
        cluster.kubectl("delete", "clusterqueue", ns, "--wait=false", check=False)


def workload(count: int = 2) -> dict[str, Any]:
    """The spec of a Workload of ``count`` pods of 1 CPU in LocalQueue ``jobs``."""
    container = {"name": "trainer", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    template = {"spec": {"containers": [container]}}
    pod_set = {"name": "workers", "count": count, "template": template}
    return {"queueName": "jobs", "podSets": [pod_set]}


def prebuilt_job(name: str, ns: str, wl: str) -> dict[str, Any]:
    job = ddpjob(name, ns)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "jobs"}
    job["metadata"]["annotations"] = {PREBUILT: wl}
    return job


def read(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.custom.get_namespaced_custom_object(*KUEUE, ns, "workloads", name)


def is_true(obj: dict[str, Any], type_: str) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(x["type"] == type_ and x["status"] == "True" for x in conds)


def set_active(cluster: Cluster, ns: str, name: str, active: bool) -> None:
    patch = {"spec": {"active": active}}
    cluster.custom.patch_namespaced_custom_object(*KUEUE, ns, "workloads", name, patch)


def test_a_job_naming_a_prebuilt_workload_runs_when_it_is_admitted_and_stops_when_evicted(
    cluster: Cluster, queue: str
) -> None:
    ns = queue
    jobs.apply(cluster, prebuilt_job("pre", ns, "pre-wl"))
    # No Workload yet: the job waits, saying so, with no pods.
    job = jobs.wait_condition(cluster, ns, "pre", "Queued")
    said = jobs.condition(job, "Queued")
    assert said["reason"] == "WaitingForAdmission" and "pre-wl does not exist" in said["message"]
    assert jobs.condition(job, "Suspended")["status"] == "True"
    assert jobs.workers(cluster, ns, "pre") == []
    # The Workload appears: Kueue admits it; it becomes the job's; the job runs on its flavor.
    kq.apply(cluster, "Workload", "pre-wl", workload(), ns)
    running = jobs.wait_running(cluster, ns, "pre", 2)
    for pod in running:
        assert pod["spec"]["nodeSelector"].items() >= FLAVOR_LABELS.items(), pod["spec"]
        assert not [k for k in pod["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]
    uid = jobs.get(cluster, ns, "pre")["metadata"]["uid"]
    owner = read(cluster, ns, "pre-wl")["metadata"]["ownerReferences"][0]
    assert (owner["uid"], owner["controller"]) == (uid, True), owner
    jobs.wait_condition(cluster, ns, "pre", "Admitted")
    # Kueue evicts it (deactivated): the pods go, the quota is given back, nothing is counted.
    set_active(cluster, ns, "pre-wl", False)
    wait_for(lambda: not jobs.workers(cluster, ns, "pre"), what="the evicted job's pods gone")
    wait_for(
        lambda: not is_true(read(cluster, ns, "pre-wl"), "QuotaReserved"), what="quota given back"
    )
    evicted = jobs.get(cluster, ns, "pre")
    assert jobs.condition(evicted, "Queued")["reason"] == "Evicted", evicted["status"]
    assert evicted["status"]["restarts"] == 0 and evicted["status"]["phase"] == "Suspended"
    jobs.wait_event(cluster, ns, "pre", "Evicted")
    # Active again: admitted again, the same attempt runs, and ends; the Workload is Finished.
    set_active(cluster, ns, "pre-wl", True)
    for pod in jobs.wait_running(cluster, ns, "pre", 2):
        pods.finish(cluster, ns, pod["metadata"]["name"], 0, uid=pod["metadata"]["uid"])
    done = jobs.wait_condition(cluster, ns, "pre", "Succeeded")
    assert done["status"]["restarts"] == 0, done["status"]
    wait_for(lambda: is_true(read(cluster, ns, "pre-wl"), "Finished"), what="Workload Finished")
    finished = next(
        x for x in read(cluster, ns, "pre-wl")["status"]["conditions"] if x["type"] == "Finished"
    )
    assert finished["reason"] == "Succeeded", finished


def test_a_prebuilt_workload_another_object_controls_is_not_used(
    cluster: Cluster, queue: str
) -> None:
    ns = queue
    owner = cluster.core.create_namespaced_config_map(ns, {"metadata": {"name": "someone"}})
    controller = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "someone",
        "uid": owner.metadata.uid,
        "controller": True,
    }
    manifest = {
        "apiVersion": "/".join(KUEUE),
        "kind": "Workload",
        "metadata": {"name": "taken", "namespace": ns, "ownerReferences": [controller]},
        "spec": workload(),
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest))
    jobs.apply(cluster, prebuilt_job("late", ns, "taken"))
    job = jobs.wait_condition(cluster, ns, "late", "Blocked")
    blocked = jobs.condition(job, "Blocked")
    assert blocked["reason"] == "NameConflict" and "ConfigMap someone" in blocked["message"]
    assert jobs.workers(cluster, ns, "late") == []
    jobs.wait_event(cluster, ns, "late", "NameConflict")
