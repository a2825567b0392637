"""DDP across the two real nodes (hack/cluster/realnode.sh up, up 1): real-node-1 has a kubelet,
containerd and network namespace of its own, so a job whose workers sit one on each node talks
through two pod networks, the link between them and both nodes' netfilter. Jobs are spread by a
topology spread constraint on the nodes' hostnames (maxSkew 1): torchrun with its c10d and its
static rendezvous and a plain ``env://`` script all-reduce across them; a pod of another namespace
on the other node cannot reach worker 0's master port while the job's own worker there can; an
in-place group restart restarts the same pods on both nodes; a worker blamed for a CUDA ECC error
moves to the other node while the rest restart in place (issue 72)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_realnode_inplace import ATTEMPT, SCRIPT
from test_realnode_jobs import assert_all_ranks
from test_realnode_netpol import (  # noqa: F401
    DROPPED,
    PORT,
    PROBE,
    _exec_probe,
    _finish,
    _master_ip,
    elsewhere,
)
from test_realnode_netpol import _job as netpol_job

from harness import jobs
from harness.cluster import ROOT, Cluster, wait_for
from harness.realnode import (
    NODE,
    NODE_1,
    ON_REAL_NODES,
    kubectl_ddp,
    pod_on_real_node,
    shell_job,
    wait_pod_done,
)

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(900)]

LAUNCHERS = ROOT / "examples" / "launchers"
ECC = (Path(__file__).parent / "data" / "hardware" / "cuda-ecc.log").read_text().split("\n", 1)[1]


def across(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with its workers spread over the real nodes, one on each: a topology spread
    constraint (maxSkew 1, DoNotSchedule) on the hostname among the real nodes. The nodes a pod's
    node affinity rules out (a node kept out), or a taint it does not tolerate (a lost node's
    unreachable:NoSchedule), are no domain of it: a worker moved off a blamed or lost node may
    join the other."""
    name = job["metadata"]["name"]
    spec = job["spec"]["template"].setdefault("spec", {})
    spec |= copy.deepcopy(ON_REAL_NODES)
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": {"ddp-operator.io/job-name": name}},
        }
    ]
    return job


def launcher(style: str, ns: str) -> dict[str, Any]:
    job = yaml.safe_load((LAUNCHERS / f"{style}.yaml").read_text())
    job["metadata"]["namespace"] = ns
    return across(job)


def nodes_of(cluster: Cluster, ns: str, name: str) -> list[str]:
    return [p["spec"].get("nodeName") for p in jobs.workers(cluster, ns, name)]


def uids(cluster: Cluster, ns: str, name: str) -> list[str]:
    return [p["metadata"]["uid"] for p in jobs.workers(cluster, ns, name)]


def spread(cluster: Cluster, ns: str, name: str) -> tuple[list[str], list[str]]:
    """The job's two workers' pod UIDs and nodes once both are placed: one on each node."""
    wait_for(
        lambda: len(found := nodes_of(cluster, ns, name)) == 2 and all(found),
        timeout=120,
        what=f"{name}'s workers placed",
    )
    placed = uids(cluster, ns, name), nodes_of(cluster, ns, name)
    assert sorted(placed[1]) == [NODE, NODE_1], placed
    return placed


def test_the_two_real_nodes_are_labelled_alike_and_each_has_its_own_pod_network(
    cluster: Cluster, images: dict[str, str]
) -> None:
    """Both Ready with the same label; real-node-1's address is its end of the link and its
    pods' addresses are in its own range."""
    selected = cluster.core.list_node(label_selector="ddp-operator.io/node=real").items
    assert sorted(n.metadata.name for n in selected) == [NODE, NODE_1]
    for node in selected:
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True", (node.metadata.name, ready)
    addresses = {n.metadata.name: [a.address for a in n.status.addresses] for n in selected}
    assert addresses == {NODE: ["127.0.0.1"], NODE_1: ["198.19.255.2"]}, addresses


def test_the_pod_network_has_no_way_off_the_machine(
    cluster: Cluster, images: dict[str, str]
) -> None:
    """The host forwards the pods' packets (the bridge plugin turns forwarding on) and has a
    default route: the fence drops what a pod sends outside 198.18.0.0/15 and a blackhole
    route takes what no node's range holds; real-node-1's namespace has no default route."""
    rules = subprocess.run(["iptables-save", "-t", "mangle"], capture_output=True, text=True)
    assert "-A FORWARD -j DDP-FENCE" in rules.stdout, rules.stdout
    assert "-A DDP-FENCE -s 198.18.0.0/15 ! -d 198.18.0.0/15 -j DROP" in rules.stdout
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    assert "blackhole 198.18.0.0/15" in routes, routes
    assert "198.18.1.0/24 via 198.19.255.2 dev ddp-h1" in routes, routes
    pin = ROOT / ".cluster" / "realnode-1" / "netns"
    inside = subprocess.run(
        ["nsenter", f"--net={pin}", "ip", "route"], capture_output=True, text=True
    )
    assert inside.returncode == 0 and "default" not in inside.stdout, inside


def test_torchrun_with_c10d_rendezvous_all_reduces_2_x_2_across_the_two_nodes(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """The c10d launcher example, one worker a node: worker 1 finds worker 0's rendezvous by its
    DNS name from the other node and every rank all-reduces; `kubectl ddp status` shows both
    nodes. (torchrun's static rendezvous runs across them in the in-place tests below, a plain
    ``env://`` script in the NetworkPolicy one.)"""
    style = "torchrun-c10d"
    jobs.apply(cluster, launcher(style, namespace))
    done = jobs.wait_phase(cluster, namespace, style, "Succeeded", timeout=400)
    assert done["status"]["restarts"] == 0, done["status"]
    assert sorted(nodes_of(cluster, namespace, style)) == [NODE, NODE_1]
    assert_all_ranks(kubectl_ddp(cluster, "logs", style, "-n", namespace), 4)
    status = kubectl_ddp(cluster, "status", style, "-n", namespace)
    assert NODE in status and NODE_1 in status, status


def test_across_nodes_only_the_jobs_own_pods_reach_its_master_port(
    cluster: Cluster,
    namespace: str,
    elsewhere: str,  # noqa: F811
    operator,
    images: dict[str, str],
) -> None:
    """A pod of another namespace on the node that does not run worker 0 is refused at worker
    0's master port (both nodes' engines decide for their own pods); the job's worker on that
    node connects; the job (plain ``env://``, one process a worker) succeeds."""
    jobs.apply(cluster, across(netpol_job("iso", namespace, images["trainer"])))
    ip = _master_ip(cluster, namespace, "iso")
    worker0 = cluster.core.read_namespaced_pod("iso-worker-0", namespace)
    other = next(n for n in (NODE, NODE_1) if n != worker0.spec.node_name)
    assert cluster.core.read_namespaced_pod("iso-worker-1", namespace).spec.node_name == other
    stranger = pod_on_real_node(
        "stranger", images["python"], ["python3", "-c", PROBE, ip, str(PORT)], nodeName=other
    )
    stranger["spec"].pop("nodeSelector")
    cluster.core.create_namespaced_pod(elsewhere, stranger)
    wait_pod_done(cluster, elsewhere, "stranger")
    said = cluster.core.read_namespaced_pod_log("stranger", elsewhere).strip().splitlines()
    assert said[-1] == DROPPED, said
    assert _exec_probe(cluster, namespace, "iso-worker-1", ip) == "CONNECTED"
    _finish(cluster, namespace, "iso")
    done = jobs.wait_phase(cluster, namespace, "iso", "Succeeded", timeout=120)
    assert done["status"]["restarts"] == 0, done["status"]


def test_an_in_place_group_restart_restarts_the_same_pods_on_both_nodes(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """Worker 1 fails in attempt 0 while worker 0 hangs: both kubelets restart their worker's
    containers in place (same pod, UID and node), and attempt 1 all-reduces across the nodes
    (2 x 2 torchrun, static rendezvous)."""
    job = shell_job("inplace", namespace, images["trainer"], SCRIPT, procsPerNode=2, backoffLimit=2)
    jobs.apply(cluster, across(job))
    first_uids, first_nodes = spread(cluster, namespace, "inplace")
    done = jobs.wait_phase(cluster, namespace, "inplace", "Succeeded", timeout=400)
    assert done["status"]["restarts"] == 1, done["status"]
    assert uids(cluster, namespace, "inplace") == first_uids
    assert nodes_of(cluster, namespace, "inplace") == first_nodes
    jobs.wait_event(cluster, namespace, "inplace", "RestartingInPlace")
    logs = kubectl_ddp(cluster, "logs", "inplace", "-n", namespace)
    assert_all_ranks(logs, 4)
    assert sorted(ATTEMPT.findall(logs)) == [(str(r), "1") for r in range(4)], logs


# Attempt 0: the blamed worker prints a CUDA uncorrectable ECC error (recorded torch output) and
# exits 1, the other waits; attempt 1 all-reduces.
ECC_SCRIPT = """
if [ "$DDP_ATTEMPT" = 0 ]; then
  if [ "$NODE_RANK" = "$BLAMED" ]; then sleep 3; cat /ecc/log; exit 1; fi
  exec python3 -c 'import time; time.sleep(600)'
fi
exec torchrun --no-python sh -c \
  'echo "ATTEMPT rank=$RANK attempt=$DDP_ATTEMPT"; exec python3 examples/scripts/allreduce.py'
"""


@pytest.mark.parametrize("blamed", [1, 0])
def test_a_worker_blamed_for_an_ecc_error_moves_to_the_other_node_the_rest_restart_in_place(
    cluster: Cluster, namespace: str, operator, images: dict[str, str], blamed: int
) -> None:
    """Issue 72 on real kubelets: worker ``blamed`` fails with a CUDA ECC error; its node goes on
    the job's excludedNodes, its pod is recreated on the other node (worker 0's DNS name follows
    it when it is worker 0), the other worker restarts in place in its same pod, and the job
    succeeds across one node."""
    name = f"ecc{blamed}"
    cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "ecc"}, "data": {"log": ECC}}
    )
    job = shell_job(name, namespace, images["trainer"], ECC_SCRIPT, procsPerNode=2, backoffLimit=2)
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["env"] = [{"name": "BLAMED", "value": str(blamed)}]
    pod["containers"][0]["volumeMounts"] = [{"name": "ecc", "mountPath": "/ecc"}]
    pod["volumes"] = [{"name": "ecc", "configMap": {"name": "ecc"}}]
    jobs.apply(cluster, across(job))
    first_uids, first_nodes = spread(cluster, namespace, name)
    done = jobs.wait_phase(cluster, namespace, name, "Succeeded", timeout=400)
    excluded = done["status"].get("excludedNodes") or []
    assert [e["node"] for e in excluded] == [first_nodes[blamed]], done["status"]
    after_uids, after_nodes = uids(cluster, namespace, name), nodes_of(cluster, namespace, name)
    kept = 1 - blamed
    assert after_uids[kept] == first_uids[kept], "the other worker restarted in its own pod"
    assert after_nodes[kept] == first_nodes[kept]
    assert after_uids[blamed] != first_uids[blamed]
    assert after_nodes[blamed] == first_nodes[kept], "the blamed worker moved off its node"
    assert done["status"]["restarts"] == 1, done["status"]
    logs = kubectl_ddp(cluster, "logs", name, "-n", namespace)
    assert_all_ranks(logs, 4)


# Elastic: each process logs its rounds' world size and all-reduces until it has trained 20 steps
# in a world of 2. Worker 1's first pod fails with the ECC error before its agent starts.
ELASTIC_TRAIN = r"""
import torch, torch.distributed as dist
dist.init_process_group("gloo")
world = dist.get_world_size()
print(f"ROUND world={world}", flush=True)
step = 0
while world < 2 or step < 20:
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    assert t.item() == world, (t, world)
    step += 1
print(f"DONE world={world} steps={step}", flush=True)
dist.destroy_process_group()
"""
ELASTIC_SCRIPT = """
if [ "$VC_TASK_INDEX" = 1 ] && [ ! -e /marker/failed ]; then
  touch /marker/failed; sleep 3; cat /ecc/log; exit 1
fi
exec python3 -m torch.distributed.run --no-python python3 -c "$TRAIN"
"""


def test_an_elastic_worker_blamed_for_an_ecc_error_is_replaced_alone_on_the_other_node(
    cluster: Cluster, namespace: str, operator, images: dict[str, str], tmp_path: Path
) -> None:
    """Issue 72's elastic case across the nodes: worker 1's pod fails with a CUDA ECC error; its
    node is excluded and worker 1 alone is replaced, on the other node (no group restart: worker
    0 keeps its pod), and the two train together again."""
    marker = tmp_path / "marker"
    marker.mkdir(mode=0o777)
    marker.chmod(0o777)
    cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "ecc"}, "data": {"log": ECC}}
    )
    job = shell_job(
        "elastic",
        namespace,
        images["trainer"],
        ELASTIC_SCRIPT,
        procsPerNode=1,
        minNodes=1,
        maxNodes=2,
        backoffLimit=0,  # a group restart would fail the job: none may happen
        rdzvConf={"last_call_timeout": "5"},
    )
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["env"] = [{"name": "TRAIN", "value": ELASTIC_TRAIN}]
    pod["containers"][0]["volumeMounts"] = [
        {"name": "ecc", "mountPath": "/ecc"},
        {"name": "marker", "mountPath": "/marker"},
    ]
    pod["volumes"] = [
        {"name": "ecc", "configMap": {"name": "ecc"}},
        {"name": "marker", "hostPath": {"path": str(marker), "type": "Directory"}},
    ]
    jobs.apply(cluster, across(job))
    first_uids, first_nodes = spread(cluster, namespace, "elastic")
    done = jobs.wait_phase(cluster, namespace, "elastic", "Succeeded", timeout=400)
    status = done["status"]
    assert status["restarts"] == 0 and status["replacements"] == 1, status
    assert [e["node"] for e in status.get("excludedNodes") or []] == [first_nodes[1]], status
    after_uids, after_nodes = (
        uids(cluster, namespace, "elastic"),
        nodes_of(cluster, namespace, "elastic"),
    )
    assert after_uids[0] == first_uids[0] and after_uids[1] != first_uids[1]
    assert after_nodes == [first_nodes[0], first_nodes[0]], (first_nodes, after_nodes)
    logs = kubectl_ddp(cluster, "logs", "elastic", "-n", namespace)
    assert logs.count("DONE world=2") == 2, logs
