"""In-place group restarts under a gang scheduler and under Kueue, in real containers on the
real node: the group restarts where it stands, so the gang's PodGroup and Kueue's Workload are
the same objects before and after, and neither schedules nor admits anything again (one
Scheduled event per pod, Kueue's admission unchanged)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_kueue_admission import KUEUE, QUEUE_LABEL
from test_realnode_inplace import _scheduled, _trainer

from harness import jobs
from harness import kueue as kq
from harness.cluster import Cluster, wait_for
from harness.realnode import shell_job

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(600)]

# Worker 1 fails in attempt 0 while worker 0 hangs there; attempt 1 succeeds.
SCRIPT = (
    'if [ "$DDP_ATTEMPT" = 0 ]; then [ "$NODE_RANK" = 1 ] && exit 3; exec sleep 600; fi; '
    'echo "ran $DDP_ATTEMPT"'
)


def _job(name: str, ns: str, image: str, **spec: Any) -> dict[str, Any]:
    return shell_job(name, ns, image, SCRIPT, backoffLimit=1, **spec)


def _restarted_in_place(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    """Wait until the job succeeded after one in-place restart; its pods, checked."""
    first = wait_for(
        lambda: len(ps := jobs.workers(cluster, ns, name)) == 2 and ps,
        timeout=120,
        what="both workers",
    )
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    assert done["status"]["restarts"] == 1, done["status"]
    after = jobs.workers(cluster, ns, name)
    assert [p["metadata"]["uid"] for p in after] == [p["metadata"]["uid"] for p in first]
    assert [_trainer(p)["restartCount"] for p in after] == [1, 1], after
    assert [_scheduled(cluster, ns, p["metadata"]["name"]) for p in after] == [1, 1]
    restarted = jobs.wait_event(cluster, ns, name, "RestartingInPlace")
    assert any(f"{name}-worker-1 exited with code 3" in e["message"] for e in restarted)
    return after


def test_the_gang_restarts_in_place_with_its_podgroup_kept(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """Kubernetes' own gang (Workload and PodGroup, kube-scheduler's GangScheduling)."""
    jobs.apply(cluster, _job("gang", namespace, images["trainer"], gangScheduling={}))
    api = ("scheduling.k8s.io", "v1alpha2", namespace)
    group = wait_for(
        lambda: cluster.custom.list_namespaced_custom_object(*api, "podgroups")["items"],
        what="the job's PodGroup",
    )[0]
    workload = cluster.custom.get_namespaced_custom_object(*api, "workloads", "gang")
    pods = _restarted_in_place(cluster, namespace, "gang")
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "gang"} for p in pods)
    again = cluster.custom.get_namespaced_custom_object(*api, "podgroups", "gang")
    assert again["metadata"]["uid"] == group["metadata"]["uid"]
    assert again["metadata"].get("generation") == group["metadata"].get("generation")
    workload_now = cluster.custom.get_namespaced_custom_object(*api, "workloads", "gang")
    assert workload_now["metadata"]["uid"] == workload["metadata"]["uid"]


@pytest.fixture
def real_queue(cluster: Cluster, kueue: None, namespace: str) -> Iterator[str]:
    """A ClusterQueue of CPU and memory for this test's namespace, and its LocalQueue ``q``."""
    kq.apply(cluster, "ResourceFlavor", "ddp-test-flavor", {})
    quota = [("cpu", "8"), ("memory", "16Gi")]
    kq.apply(
        cluster, "ClusterQueue", namespace, kq.cluster_queue(namespace, "ddp-test-flavor", quota)
    )
    kq.apply(cluster, "LocalQueue", "q", {"clusterQueue": namespace}, namespace)
    try:
        yield "q"
    finally:
        cluster.kubectl("delete", "clusterqueue", namespace, "--wait=false", check=False)


def test_under_kueue_the_group_restarts_in_place_without_a_new_admission(
    cluster: Cluster, namespace: str, operator, images: dict[str, str], real_queue: str
) -> None:
    job = _job("queued", namespace, images["trainer"])
    job["metadata"]["labels"] = {QUEUE_LABEL: real_queue}
    jobs.apply(cluster, job)
    workloads = (*KUEUE, namespace, "workloads")

    def admitted() -> list[dict[str, Any]]:
        found = cluster.custom.list_namespaced_custom_object(*workloads)["items"]
        return [w for w in found if jobs.condition(w, "Admitted")]

    (workload,) = wait_for(admitted, timeout=120, what="Kueue to admit the job's Workload")
    since = jobs.condition(workload, "Admitted")["lastTransitionTime"]
    _restarted_in_place(cluster, namespace, "queued")
    found = cluster.custom.list_namespaced_custom_object(*workloads)["items"]
    assert [w["metadata"]["uid"] for w in found] == [workload["metadata"]["uid"]], found
    assert jobs.condition(found[0], "Admitted")["lastTransitionTime"] == since, found[0]
    assert jobs.condition(found[0], "Admitted")["status"] == "True"
