"""Gang scheduling with the real schedulers of the local cluster: two DDPJobs of 3 nodes x 8 GPUs
on 4 nodes of 8 GPUs. Without a gang both hold GPUs and neither runs; with Kubernetes' own gang
(scheduling.k8s.io/v1alpha2 Workload and PodGroup, kube-scheduler's GangScheduling plugin) one
runs whole and the other waits with none placed, then runs.

The nodes are this test's own fake nodes (kwok), tainted for its jobs only. The order the
scheduler sees the pods in is made the same every run: each worker carries a scheduling gate that
the test lifts one pod at a time, interleaving the two jobs (a0, b0, a1, b1, a2, b2), the order
that deadlocks a busy cluster.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from harness import jobs, pods
from harness.cluster import ROOT, Cluster, wait_for
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

HOLD = "ddp-operator.io/test-hold"
GROUP_APIS = {
    "Kubernetes": ("scheduling.k8s.io", "v1alpha2"),
    "Coscheduling": ("scheduling.x-k8s.io", "v1alpha1"),
    "Volcano": ("scheduling.volcano.sh", "v1beta1"),
}
EXAMPLE = ROOT / "examples" / "gang-job.yaml"


def gated_job(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A job of 3 nodes x 8 GPUs on the pool, each worker held by a scheduling gate."""
    template = pods.on_pool(namespace)
    template["spec"]["schedulingGates"] = [{"name": HOLD}]
    return ddpjob(name, namespace, nodes=3, accelerator=pods.GPUS, template=template, **spec)


def lift(cluster: Cluster, ns: str, pod: str) -> None:
    """Let the scheduler see the pod: remove its scheduling gate."""
    cluster.core.patch_namespaced_pod(pod, ns, [{"op": "remove", "path": "/spec/schedulingGates"}])


def placed(cluster: Cluster, ns: str, job: str) -> list[str]:
    """The job's workers bound to a node."""
    return sorted(
        p["metadata"]["name"] for p in jobs.workers(cluster, ns, job) if p["spec"].get("nodeName")
    )


def apply_both(cluster: Cluster, ns: str, **spec: Any) -> None:
    for name in ("a", "b"):
        jobs.apply(cluster, gated_job(name, ns, **spec))
    for name in ("a", "b"):
        wait_for(lambda name=name: len(jobs.workers(cluster, ns, name)) == 3, what=f"{name}'s pods")


def test_without_a_gang_two_jobs_each_hold_gpus_and_neither_runs(
    cluster: Cluster, pool: str
) -> None:
    ns = pool
    apply_both(cluster, ns)
    for i in range(2):
        for name in ("a", "b"):
            lift(cluster, ns, f"{name}-worker-{i}")
            wait_for(lambda name=name, i=i: len(placed(cluster, ns, name)) == i + 1)
    for name in ("a", "b"):
        lift(cluster, ns, f"{name}-worker-2")
    for name in ("a", "b"):
        job = jobs.wait_condition(cluster, ns, name, "Unschedulable")
        assert "Insufficient nvidia.com/gpu" in jobs.condition(job, "Unschedulable")["message"]
    # The deadlock: 16 GPUs held by each job, idle, and neither can ever start.
    for name in ("a", "b"):
        assert placed(cluster, ns, name) == [f"{name}-worker-0", f"{name}-worker-1"]
        job = jobs.get(cluster, ns, name)
        assert jobs.condition(job, "Running")["status"] == "False"
        assert jobs.condition(job, "GangScheduled") is None


def podgroup(cluster: Cluster, ns: str, scheduler: str, name: str) -> dict[str, Any]:
    """The job's group object of that scheduler (its PodGroup)."""
    group, version = GROUP_APIS[scheduler]
    return cluster.custom.get_namespaced_custom_object(group, version, ns, "podgroups", name)


def one_runs_whole_and_the_other_waits(cluster: Cluster, ns: str, scheduler: str) -> None:
    """The deadlock scenario with a gang: the pods are let go in the order that deadlocks
    (a0, b0, a1, b1), none is bound while no gang is complete; then a's last: a is bound whole,
    b has none bound and says it waits for its gang; a succeeds: b is bound whole and runs."""
    apply_both(cluster, ns, gangScheduling={"scheduler": scheduler})
    for i in range(2):
        for name in ("a", "b"):
            lift(cluster, ns, f"{name}-worker-{i}")
    time.sleep(2)  # what a scheduler without the gang would have used to bind them
    assert placed(cluster, ns, "a") == placed(cluster, ns, "b") == []
    lift(cluster, ns, "a-worker-2")
    wait_for(lambda: len(placed(cluster, ns, "a")) == 3, what="job a's gang to be bound")
    lift(cluster, ns, "b-worker-2")
    job_b = jobs.wait_condition(cluster, ns, "b", "Unschedulable")
    waiting = jobs.condition(job_b, "GangScheduled")
    assert waiting["status"] == "False" and waiting["reason"] == "WaitingForGang"
    assert waiting["message"].startswith("0 of 3 workers placed"), waiting
    assert placed(cluster, ns, "b") == []
    job_a = jobs.wait_condition(cluster, ns, "a", "GangScheduled")
    assert jobs.condition(job_a, "GangScheduled")["reason"] == "GangScheduled"
    assert any(e["reason"] == "WaitingForGang" for e in jobs.events(cluster, ns, "b"))

    # The first job ends: the second is placed whole and runs.
    jobs.wait_phase(cluster, ns, "a", "Running")
    for i in range(3):
        pods.finish(cluster, ns, f"a-worker-{i}", 0)
    jobs.wait_phase(cluster, ns, "a", "Succeeded")
    wait_for(lambda: len(placed(cluster, ns, "b")) == 3, what="job b's gang to be bound")
    jobs.wait_condition(cluster, ns, "b", "GangScheduled")
    jobs.wait_phase(cluster, ns, "b", "Running")


def test_kubernetes_gang_runs_one_job_whole_and_the_other_waits_with_none_placed(
    cluster: Cluster, pool: str
) -> None:
    one_runs_whole_and_the_other_waits(cluster, pool, "Kubernetes")
    for name in ("a", "b"):
        group = podgroup(cluster, pool, "Kubernetes", name)
        assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
        assert group["metadata"]["ownerReferences"][0]["kind"] == "DDPJob"


def check_podgroups(cluster: Cluster, ns: str, scheduler: str, name: str, mark: str) -> None:
    """A second scheduler's PodGroups (minMember, minResources, owned by the job), and each pod
    sent to it (``name``) as a member of its job's group (``mark``: the label or annotation)."""
    for job in ("a", "b"):
        group = podgroup(cluster, ns, scheduler, job)
        assert group["spec"]["minMember"] == 3
        assert group["spec"]["minResources"]["nvidia.com/gpu"] == "24"
        assert group["metadata"]["ownerReferences"][0]["kind"] == "DDPJob"
        for pod in jobs.workers(cluster, ns, job):
            meta = pod["metadata"]
            assert pod["spec"]["schedulerName"] == name
            assert {**meta.get("labels", {}), **meta.get("annotations", {})}[mark] == job


@pytest.mark.usefixtures("coscheduling")
def test_coscheduling_runs_one_job_whole_and_the_other_waits_with_none_placed(
    cluster: Cluster, pool: str
) -> None:
    """The same with scheduler-plugins' scheduler (Coscheduling), a second scheduler."""
    one_runs_whole_and_the_other_waits(cluster, pool, "Coscheduling")
    check_podgroups(
        cluster,
        pool,
        "Coscheduling",
        "scheduler-plugins-scheduler",
        "scheduling.x-k8s.io/pod-group",
    )


@pytest.mark.usefixtures("volcano")
def test_volcano_runs_one_job_whole_and_the_other_waits_with_none_placed(
    cluster: Cluster, pool: str
) -> None:
    """The same with Volcano (its scheduler, controller manager and webhooks)."""
    one_runs_whole_and_the_other_waits(cluster, pool, "Volcano")
    check_podgroups(cluster, pool, "Volcano", "volcano", "scheduling.k8s.io/group-name")


def test_the_gang_is_kept_across_a_group_restart(cluster: Cluster, namespace: str) -> None:
    ns = namespace
    jobs.apply(cluster, ddpjob("r", ns, nodes=2, backoffLimit=2, gangScheduling={}))
    jobs.wait_phase(cluster, ns, "r", "Running")
    group = cluster.custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", ns, "podgroups", "r"
    )
    pods.finish(cluster, ns, "r-worker-1", 3)
    jobs.wait_running(cluster, ns, "r", 2, attempt=1)
    job = jobs.wait_condition(cluster, ns, "r", "GangScheduled")
    assert job["status"]["restarts"] == 1
    again = cluster.custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", ns, "podgroups", "r"
    )
    assert again["metadata"]["uid"] == group["metadata"]["uid"]
    for pod in jobs.workers(cluster, ns, "r"):
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "r"}

    # Deleting the job takes its Workload and PodGroup with it (garbage collection).
    cluster.custom.delete_namespaced_custom_object(jobs.GROUP, jobs.VERSION, ns, jobs.PLURAL, "r")
    for plural in ("podgroups", "workloads"):
        wait_for(
            lambda plural=plural: (
                not cluster.custom.list_namespaced_custom_object(
                    "scheduling.k8s.io", "v1alpha2", ns, plural
                )["items"]
            ),
            what=f"the job's {plural} to go",
        )


def test_a_podgroup_of_the_same_name_that_is_not_the_jobs_blocks_it(
    cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    foreign = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "shared"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
    }
    cluster.custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", ns, "podgroups", foreign
    )
    jobs.apply(cluster, ddpjob("mine", ns, nodes=2, gangScheduling={"podGroup": "shared"}))
    job = jobs.wait_condition(cluster, ns, "mine", "Blocked")
    cond = jobs.condition(job, "Blocked")
    assert cond["reason"] == "NameConflict" and "PodGroup shared" in cond["message"], cond
    assert jobs.workers(cluster, ns, "mine") == []
    group = cluster.custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", ns, "podgroups", "shared"
    )
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 5  # untouched

    cluster.custom.delete_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", ns, "podgroups", "shared"
    )
    jobs.wait_phase(cluster, ns, "mine", "Running", timeout=120)
    jobs.wait_condition(cluster, ns, "mine", "Blocked", status="False")


def test_the_example_runs_gang_scheduled(cluster: Cluster, namespace: str) -> None:
    """examples/gang-job.yaml as a user applies it: placed whole on the fake GPU nodes."""
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE))
    job = jobs.wait_condition(cluster, namespace, "gang-ddp", "GangScheduled", timeout=120)
    assert jobs.condition(job, "GangScheduled")["reason"] == "GangScheduled"
    assert len(placed(cluster, namespace, "gang-ddp")) == 3


def test_a_gang_scheduler_the_cluster_does_not_serve_blocks_the_job_with_no_pods(
    cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    # A gang scheduler whose API this cluster does not serve (on the local cluster: Volcano and
    # scheduler-plugins are installed only by the tests that need them, which run later).
    served = set(cluster.kubectl("api-versions").stdout.split())
    absent = [s for s in ("Volcano", "Coscheduling") if "/".join(GROUP_APIS[s]) not in served]
    if not absent:
        pytest.skip("this cluster serves the PodGroup API of every gang scheduler")
    scheduler, (group, version) = absent[0], GROUP_APIS[absent[0]]
    name = f"v{uuid.uuid4().hex[:4]}"
    jobs.apply(cluster, ddpjob(name, ns, nodes=2, gangScheduling={"scheduler": scheduler}))
    job = jobs.wait_condition(cluster, ns, name, "Blocked")
    cond = jobs.condition(job, "Blocked")
    assert cond["reason"] == "GangSchedulingUnavailable", cond
    assert f"podgroups.{group}/{version}" in cond["message"]
    assert scheduler in cond["message"]
    wait_for(  # Events are posted after the status is written
        lambda: any(
            e["reason"] == "GangSchedulingUnavailable" for e in jobs.events(cluster, ns, name)
        ),
        timeout=10,
        what="the GangSchedulingUnavailable Event",
    )
    time.sleep(1)  # a pass that would create pods has had time to
    assert jobs.workers(cluster, ns, name) == []
    assert cluster.core.list_namespaced_service(ns).items == []
