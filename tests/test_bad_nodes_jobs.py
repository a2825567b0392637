"""Bad nodes with a real API server, scheduler and operator, on the test's own pool of fake GPU
nodes (kwok; a failed pod fails whole there, so the group is recreated: every new pod avoids the
nodes kept out): a worker failing with a CUDA ECC error excludes its node and the next attempt's
workers land elsewhere (Events on the job and on the Node); a ValueError excludes nothing;
nodes whose conditions say the GPU is broken get no new worker; past maxExcludedNodes a blamed
node is not kept out; with no node left the job waits, saying so, and restarts nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

DATA = Path(__file__).parent / "data" / "hardware"
ECC = (DATA / "cuda-ecc.log").read_text().split("\n", 1)[1]
BUG = (DATA / "value-error.log").read_text().split("\n", 1)[1]
NODE_LIST_SECONDS = 16  # the operator lists the Nodes every 15 s at most (api/nodewatch.py)
KUBECTL_DDP = str(Path(sys.executable).parent / "kubectl-ddp")


def gpu_job(name: str, pool: str, nodes: int = 2, **spec: Any) -> dict[str, Any]:
    """A job of ``nodes`` x 8 GPUs on the pool: one worker per fake node."""
    return ddpjob(
        name, pool, nodes=nodes, accelerator=pods.GPUS, template=pods.on_pool(pool), **spec
    )


def node_of(pod: dict[str, Any]) -> str:
    return pod["spec"]["nodeName"]


def fail(cluster: Cluster, ns: str, pod: dict[str, Any], message: str) -> None:
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    pods.finish(cluster, ns, name, 1, via="status", uid=uid, message=message)


def excluded(cluster: Cluster, ns: str, name: str, count: int = 1) -> list[dict[str, Any]]:
    def listed() -> list[dict[str, Any]] | None:
        found = ((jobs.get(cluster, ns, name) or {}).get("status") or {}).get("excludedNodes")
        return found if found and len(found) >= count else None

    return wait_for(listed, timeout=60, what=f"{count} node(s) on {name}'s excludedNodes")


def kept_off(pod: dict[str, Any]) -> list[str]:
    """The nodes of the pod's own pool its required node affinity keeps it off (metadata.name
    NotIn; nodes marked broken elsewhere, other tests' pools, may be kept off too)."""
    pool = pod["metadata"]["namespace"]
    affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return sorted(
        {
            v
            for term in affinity.get("nodeSelectorTerms") or ()
            for f in term.get("matchFields") or ()
            if f["key"] == "metadata.name" and f["operator"] == "NotIn"
            for v in f["values"]
            if v.startswith(f"{pool}-")
        }
    )


def test_an_ecc_error_excludes_its_node_and_the_next_attempt_lands_elsewhere(
    cluster: Cluster, pool: str
) -> None:
    ns = pool
    jobs.apply(cluster, gpu_job("ecc", ns))
    first = wait_running(cluster, ns, "ecc", 2)
    bad = node_of(first[1])
    fail(cluster, ns, first[1], ECC)
    (entry,) = excluded(cluster, ns, "ecc")
    assert entry["node"] == bad and entry["reason"] == "HardwareError", entry
    assert "uncorrectable ECC error encountered" in entry["evidence"], entry
    again = wait_running(cluster, ns, "ecc", 2, attempt=1, timeout=90)
    assert bad not in {node_of(w) for w in again}, [node_of(w) for w in again]
    assert all(kept_off(w) == [bad] for w in again)
    (event,) = jobs.wait_event(cluster, ns, "ecc", "NodeExcluded")
    assert bad in event["message"] and event["type"] == "Warning", event

    def on_node() -> list[dict[str, Any]]:
        found = cluster.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={bad}"
        )
        return [e for e in found.items if e.reason == "DDPJobBlamedNode"]

    (node_event,) = wait_for(on_node, timeout=15, what=f"the Event on node {bad}")
    assert f"DDPJob {ns}/ecc" in node_event.message, node_event.message
    described = cluster.kubectl("describe", "node", bad).stdout
    assert "DDPJobBlamedNode" in described, described
    shown = subprocess.run(
        [KUBECTL_DDP, "status", "ecc", "-n", ns],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "excluded nodes (1):" in shown.stdout, shown.stdout + shown.stderr
    assert f"{bad}: HardwareError" in shown.stdout, shown.stdout
    for w in again:
        pods.finish(cluster, ns, w["metadata"]["name"], 0)
    done = jobs.wait_phase(cluster, ns, "ecc", "Succeeded", timeout=60)
    assert done["status"]["excludedNodes"] == [entry]


def test_a_value_error_excludes_nothing(cluster: Cluster, pool: str) -> None:
    ns = pool
    jobs.apply(cluster, gpu_job("bug", ns))
    first = wait_running(cluster, ns, "bug", 2)
    fail(cluster, ns, first[1], BUG)
    again = wait_running(cluster, ns, "bug", 2, attempt=1, timeout=90)
    job = jobs.get(cluster, ns, "bug")
    assert not job["status"].get("excludedNodes"), job["status"]
    assert job["status"]["firstFailure"]["summary"] == "ValueError: bad batch 17 in shard 3"
    assert all(kept_off(w) == [] for w in again)
    assert not [e for e in jobs.events(cluster, ns, "bug") if e["reason"] == "NodeExcluded"]


def test_nodes_whose_conditions_say_the_gpu_is_broken_get_no_new_worker(
    cluster: Cluster, pool: str
) -> None:
    ns = pool
    names = [f"{pool}-gpu-{i}" for i in range(4)]
    broken = names[:2]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name in broken:  # as NVSentinel's syslog health monitor marks a node
        cond = {
            "type": "SysLogsXIDError",
            "status": "True",
            "reason": "SysLogsXIDErrorIsNotHealthy",
            "message": "ErrorCode:79 PCI:0000:3b:00 GPU has fallen off the bus",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        cluster.core.patch_node_status(name, {"status": {"conditions": [cond]}})
    time.sleep(NODE_LIST_SECONDS)  # the operator's next list of the Nodes sees them
    jobs.apply(cluster, gpu_job("marked", ns))
    running = wait_running(cluster, ns, "marked", 2)
    assert {node_of(w) for w in running} == set(names[2:]), [node_of(w) for w in running]
    assert all(set(broken) <= set(kept_off(w)) for w in running)
    assert not (jobs.get(cluster, ns, "marked").get("status") or {}).get("excludedNodes")


def test_past_the_bound_a_blamed_node_is_not_kept_out(cluster: Cluster, pool: str) -> None:
    ns = pool
    jobs.apply(cluster, gpu_job("bound", ns, failurePolicy={"maxExcludedNodes": 1}))
    first = wait_running(cluster, ns, "bound", 2)
    fail(cluster, ns, first[1], ECC)
    (entry,) = excluded(cluster, ns, "bound")
    again = wait_running(cluster, ns, "bound", 2, attempt=1, timeout=90)
    second = node_of(again[0])
    fail(cluster, ns, again[0], ECC)
    wait_for(
        lambda: (
            jobs.condition(jobs.get(cluster, ns, "bound"), "NodesExcluded")["reason"]
            == "ExclusionLimitReached"
        ),
        timeout=60,
        what="ExclusionLimitReached",
    )
    job = jobs.get(cluster, ns, "bound")
    limit = jobs.condition(job, "NodesExcluded")
    assert f"node {second} is not kept out" in limit["message"], limit
    assert "maxExcludedNodes is 1" in limit["message"], limit
    assert job["status"]["excludedNodes"] == [entry]
    third = wait_running(cluster, ns, "bound", 2, attempt=2, timeout=90)
    assert all(kept_off(w) == [entry["node"]] for w in third)


def test_with_no_node_left_the_job_waits_saying_so_and_restarts_nothing(
    cluster: Cluster, pool: str
) -> None:
    ns = pool
    jobs.apply(cluster, gpu_job("full", ns, nodes=4))
    first = wait_running(cluster, ns, "full", 4)
    bad = node_of(first[2])
    fail(cluster, ns, first[2], ECC)
    excluded(cluster, ns, "full")

    def no_node_left() -> dict[str, Any] | None:
        job = jobs.get(cluster, ns, "full")
        cond = jobs.condition(job, "NodesExcluded") or {}
        return job if cond.get("reason") == "NoNodeLeft" else None

    job = wait_for(no_node_left, timeout=90, what="NodesExcluded NoNodeLeft")
    cond = jobs.condition(job, "NodesExcluded")
    assert bad in cond["message"] and "cannot be scheduled" in cond["message"], cond
    jobs.wait_event(cluster, ns, "full", "NoNodeLeft")
    time.sleep(5)  # waits: no restart, no new attempt
    job = jobs.get(cluster, ns, "full")
    assert job["status"]["restarts"] == 1 and job["status"]["phase"] != "Failed", job["status"]
    pending = [w for w in workers(cluster, ns, "full") if not w["spec"].get("nodeName")]
    assert len(pending) == 1 and kept_off(pending[0]) == [bad]
