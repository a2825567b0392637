"""Proof that the test cluster is a real control plane: scheduler, controller manager, API."""

from __future__ import annotations

import re

import pytest

from harness import pods
from harness.cluster import ROOT, Cluster, wait_for

pytestmark = [pytest.mark.cluster]


def pod(name: str, gpus: int | None = None, owner: dict | None = None) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta: dict = {"name": name}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def test_server_reports_the_built_version(cluster: Cluster) -> None:
    info = cluster.kubectl("version", "-o", "json").stdout
    if not cluster.local:
        assert '"serverVersion"' in info
        return
    pinned = re.search(
        r"^K8S_VERSION=(\S+)", (ROOT / "hack/cluster/versions.env").read_text(), re.M
    )
    assert pinned is not None
    assert f'"gitVersion": "{pinned.group(1)}"' in info.split('"serverVersion"')[1]


def test_nodes_advertise_their_accelerators(cluster: Cluster) -> None:
    if not cluster.local:
        pytest.skip("the fake accelerator nodes exist on the local cluster only")
    nodes = {n.metadata.name: n.status.allocatable for n in cluster.core.list_node().items}
    gpu = [n for n, a in nodes.items() if a.get("nvidia.com/gpu") == "8"]
    npu = [n for n, a in nodes.items() if a.get("huawei.com/Ascend910") == "8"]
    cpu = [n for n, a in nodes.items() if n.startswith("cpu-node")]
    assert (len(gpu), len(npu), len(cpu)) == (4, 2, 2), nodes


def test_pod_with_eight_gpus_runs_on_a_gpu_node(cluster: Cluster, namespace: str) -> None:
    cluster.core.create_namespaced_pod(namespace, pod("eight", gpus=8))
    running = pods.wait_phase(cluster, namespace, "eight", "Running")
    node = cluster.core.read_node(running["spec"]["nodeName"])
    assert node.status.allocatable["nvidia.com/gpu"] == "8"


def test_pod_with_nine_gpus_is_unschedulable(cluster: Cluster, namespace: str) -> None:
    cluster.core.create_namespaced_pod(namespace, pod("nine", gpus=9))

    def unschedulable() -> dict | None:
        p = pods.get(cluster, namespace, "nine")
        for cond in (p or {}).get("status", {}).get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                return cond
        return None

    cond = wait_for(unschedulable, timeout=60, what="PodScheduled=False")
    assert cond["reason"] == "Unschedulable"
    assert "nvidia.com/gpu" in cond["message"]
    assert pods.phase(cluster, namespace, "nine") == "Pending"


def test_garbage_collector_removes_orphans(cluster: Cluster, namespace: str) -> None:
    owner = cluster.core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    cluster.core.create_namespaced_pod(namespace, pod("child", owner=ref))
    pods.wait_phase(cluster, namespace, "child", "Running")
    cluster.core.delete_namespaced_config_map("owner", namespace)
    wait_for(lambda: pods.get(cluster, namespace, "child") is None, timeout=90, what="GC of child")


@pytest.mark.parametrize("via", ["stage", "status"])
def test_pods_succeed_and_fail_on_command(cluster: Cluster, namespace: str, via: str) -> None:
    for name in ("ok", "bad"):
        cluster.core.create_namespaced_pod(namespace, pod(name))
        pods.wait_phase(cluster, namespace, name, "Running")
    pods.finish(cluster, namespace, "ok", 0, via=via)
    pods.finish(cluster, namespace, "bad", 3, via=via)
    ok = pods.wait_phase(cluster, namespace, "ok", "Succeeded")
    bad = pods.wait_phase(cluster, namespace, "bad", "Failed")
    assert ok["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert bad["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    # A finished pod stays finished: nothing flips it back to Running.
    assert pods.phase(cluster, namespace, "bad") == "Failed"


def test_deleted_pod_disappears(cluster: Cluster, namespace: str) -> None:
    cluster.core.create_namespaced_pod(namespace, pod("gone"))
    pods.wait_phase(cluster, namespace, "gone", "Running")
    pods.delete(cluster, namespace, "gone")
    wait_for(lambda: pods.get(cluster, namespace, "gone") is None, timeout=30, what="deletion")
