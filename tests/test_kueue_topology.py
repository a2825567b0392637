"""Kueue's topology-aware scheduling (TAS), for real: 7 fake nodes of the test's own, labelled by
block and rack (block a: racks a0 of 2 nodes and a1 of 1; block b: racks b0 and b1 of 2 each),
one 8-GPU worker per node, in a ClusterQueue whose flavor has that Topology. A 4-worker job
whose template asks for one block (Kueue's ``kueue.x-k8s.io/podset-required-topology``) lands
whole in block b, the only one with room, with its ranks in index order: workers 0 and 1 in
one rack, 2 and 3 in the other (Kueue places a pod group by ``pod-group-pod-index``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest
import yaml

from harness import jobs, pods
from harness import kueue as kq
from harness.cluster import Cluster
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

BLOCK, RACK = "ddp-test.io/block", "ddp-test.io/rack"
HOST = "kubernetes.io/hostname"
RACKS = {"a0": 2, "a1": 1, "b0": 2, "b1": 2}  # nodes per rack; a rack's block is its letter


@pytest.fixture
def racks(cluster: Cluster, kueue: None, namespace: str) -> Iterator[str]:
    """The test's 7 nodes, its Topology, TAS flavor, ClusterQueue and LocalQueue ``racks``."""
    if not cluster.local:
        pytest.skip("adds fake nodes to the local kwok cluster (hack/cluster/cluster.sh)")
    ns = namespace
    template = next(
        n
        for n in yaml.safe_load_all(pods.NODES_FILE.read_text())
        if n and "gpu" in n["metadata"]["name"]
    )
    names = []
    for rack, count in RACKS.items():
        for i in range(count):
            node = copy.deepcopy(template)
            name = f"{ns}-{rack}-{i}"
            node["metadata"]["name"] = name
            node["metadata"]["labels"] |= {
                HOST: name,
                pods.POOL_LABEL: ns,
                BLOCK: rack[0],
                RACK: rack,
            }
            node["spec"] = {
                "taints": [{"key": pods.POOL_LABEL, "value": ns, "effect": "NoSchedule"}]
            }
            cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
            names.append(name)
    levels = [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]
    kq.apply(cluster, "Topology", ns, {"levels": levels})
    toleration = {"key": pods.POOL_LABEL, "operator": "Equal", "value": ns, "effect": "NoSchedule"}
    kq.apply(
        cluster,
        "ResourceFlavor",
        ns,
        {"nodeLabels": {pods.POOL_LABEL: ns}, "topologyName": ns, "tolerations": [toleration]},
    )
    resources = [("cpu", "1000"), ("memory", "10Ti"), ("nvidia.com/gpu", "64")]
    kq.apply(cluster, "ClusterQueue", ns, kq.cluster_queue(ns, ns, resources))
    kq.apply(cluster, "LocalQueue", "racks", {"clusterQueue": ns}, ns)
    try:
        for name in names:
            cluster.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=60s")
        yield ns
    finally:
        cluster.kubectl("delete", "clusterqueue", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "topology", ns, "--wait=false", check=False)
        for name in names:
            cluster.core.delete_node(name)


def test_a_job_asking_for_one_block_lands_in_one_with_its_ranks_in_order(
    cluster: Cluster, racks: str
) -> None:
    ns = racks
    template = pods.on_pool(ns)
    template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": BLOCK}}
    job = ddpjob("tas", ns, nodes=4, accelerator=pods.GPUS, template=template)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "racks"}
    jobs.apply(cluster, job)
    running = jobs.wait_running(cluster, ns, "tas", 4, timeout=90)
    for pod in running:
        index = pod["metadata"]["labels"]["ddp-operator.io/worker-index"]
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-pod-index"] == index
    nodes = {n.metadata.name: n.metadata.labels for n in cluster.core.list_node().items}
    placed = [nodes[p["spec"]["nodeName"]] for p in running]  # by worker index
    assert {n[BLOCK] for n in placed} == {"b"}, [n[HOST] for n in placed]
    in_racks = [n[RACK] for n in placed]
    assert in_racks[0] == in_racks[1] != in_racks[2] == in_racks[3], in_racks
    jobs.wait_condition(cluster, ns, "tas", "Admitted")


def test_a_job_level_workload_is_placed_the_same_way(cluster: Cluster, racks: str) -> None:
    """The same through a job-level Workload (as MultiKueue's copy on a worker cluster runs):
    its pod set asks for one block, ranked by the worker index; the operator gates the pods
    until Kueue places each."""
    ns = racks
    gpus = {"nvidia.com/gpu": "8"}
    container = {"name": "trainer", "image": "x", "resources": {"requests": gpus, "limits": gpus}}
    request = {"required": BLOCK, "podIndexLabel": "ddp-operator.io/worker-index"}
    pod_set = {
        "name": "workers",
        "count": 4,
        "topologyRequest": request,
        "template": {"spec": {"containers": [container]}},
    }
    kq.apply(cluster, "Workload", "tas-wl", {"queueName": "racks", "podSets": [pod_set]}, ns)
    template = pods.on_pool(ns)
    template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": BLOCK}}
    job = ddpjob("tasj", ns, nodes=4, accelerator=pods.GPUS, template=template)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "racks"}
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/prebuilt-workload-name": "tas-wl"}
    jobs.apply(cluster, job)
    running = jobs.wait_running(cluster, ns, "tasj", 4, timeout=90)
    for pod in running:
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "tas-wl"
        assert not pod["spec"].get("schedulingGates"), pod["spec"]  # lifted by Kueue
    nodes = {n.metadata.name: n.metadata.labels for n in cluster.core.list_node().items}
    placed = [nodes[p["spec"]["nodeName"]] for p in running]
    assert {n[BLOCK] for n in placed} == {"b"}, [n[HOST] for n in placed]
    in_racks = [n[RACK] for n in placed]
    assert in_racks[0] == in_racks[1] != in_racks[2] == in_racks[3], in_racks
