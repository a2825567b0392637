"""The fault harness itself (tests/harness/faults.py, scenario.py), not the operator.

The silent-node test takes about 30 s: a node goes Ready=Unknown once its Lease has gone
node-monitor-grace-period (20 s on the local cluster) without renewal.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import urllib3

from harness import faults
from harness import jobs as ddpjobs
from harness import pods as podctl
from harness.cluster import Cluster, wait_for
from harness.operator import OperatorProcess
from harness.scenario import Kubelet, Ledger, ScriptedJob, run_until_done, verify

pytestmark = [pytest.mark.cluster]

NODE = "cpu-node-1"
GRACE = 20  # node-monitor-grace-period of hack/cluster/kwokctl.yaml


@pytest.fixture
def local(cluster: Cluster) -> Cluster:
    if not cluster.local:
        pytest.skip("faults are injected into the local kwok cluster only (hack/cluster)")
    return cluster


def bare_pod(cluster: Cluster, ns: str, node: str) -> str:
    """A pod bound to ``node`` (no scheduler involved), Running; returns its name."""
    name = f"p-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "none"}]},
        },
    )
    podctl.wait_phase(cluster, ns, name, "Running", timeout=30)
    return name


@pytest.fixture
def silenced(local: Cluster) -> Iterator[datetime]:
    """NODE silenced for the test, revived (and checked Ready) afterwards."""
    last = faults.silence_node(local, NODE)
    try:
        yield last
    finally:
        faults.revive_node(local, NODE)


def test_silenced_node_goes_unknown_keeps_its_pods_and_revives(
    local: Cluster, namespace: str
) -> None:
    pod = bare_pod(local, namespace, NODE)
    t0 = time.monotonic()
    last = faults.silence_node(local, NODE)
    try:
        assert (datetime.now(UTC) - last).total_seconds() < 15, "no recent heartbeat before"
        node = faults.wait_node_ready_status(local, NODE, "Unknown", timeout=GRACE + 40)
        took = time.monotonic() - t0
        node = wait_for(
            lambda: (n := faults.get_node(local, NODE)) and faults.has_unreachable_taint(n) and n,
            timeout=20,
            what=f"{NODE} tainted {faults.UNREACHABLE_TAINT}",
        )
        assert faults.last_heartbeat(local, NODE) == last, "a silenced node heartbeated"
        print(f"{NODE}: Ready=Unknown {took:.1f}s after silence_node")
        # Its pods are no longer driven: a deleted pod stays Terminating.
        podctl.delete(local, namespace, pod)
        time.sleep(3)
        left = podctl.get(local, namespace, pod)
        assert left and left["metadata"].get("deletionTimestamp"), left
    finally:
        faults.revive_node(local, NODE)
    node = faults.get_node(local, NODE)
    assert not faults.is_silenced(node)
    assert (faults.ready_condition(node) or {}).get("status") == "True"
    # Managed again: kwok completes the pending deletion.
    wait_for(lambda: podctl.get(local, namespace, pod) is None, timeout=30, what="pod gone")
    wait_for(
        lambda: not faults.has_unreachable_taint(faults.get_node(local, NODE)),
        timeout=30,
        what="unreachable taint removed",
    )


def test_other_nodes_keep_working_while_one_is_silent(
    local: Cluster, namespace: str, silenced: datetime
) -> None:
    other = bare_pod(local, namespace, "cpu-node-0")
    podctl.finish(local, namespace, other, 0)
    podctl.wait_phase(local, namespace, other, "Succeeded", timeout=30)
    # No new pod lands on the silent node: one that may only go there stays unscheduled.
    stuck = f"p-{uuid.uuid4().hex[:6]}"
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    local.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": stuck},
            "spec": {"affinity": affinity, "containers": [{"name": "c", "image": "none"}]},
        },
    )
    pod = wait_for(
        lambda: (p := podctl.get(local, namespace, stuck)) and p["status"].get("conditions") and p,
        timeout=30,
        what="the scheduler's verdict",
    )
    assert pod["status"]["conditions"][0]["reason"] == "Unschedulable", pod["status"]
    assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"


@pytest.mark.serial
def test_control_plane_down_and_back(
    local: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """One outage (5 s: etcd and the API server stopped) for the whole harness: nothing answers
    meanwhile; the fake kubelet and the ledger, watching through it, notice it and then carry a
    job to its end; the objects made before it are there, and the kubeconfig on disk works."""
    before = local.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "before"}, "data": {"k": "v"}}
    )

    def outage() -> None:
        with (
            faults.control_plane_down(local, 5) as down,
            pytest.raises(urllib3.exceptions.HTTPError),  # nothing answers
        ):
            local.core.read_namespaced_config_map("before", namespace, _request_timeout=3)
        stop, start = down.stopped - down.began, down.started - down.restarting
        print(f"control plane: stop {stop:.1f}s, down 5s, start {start:.1f}s")

    ledger = run_scripted(local, namespace, [ScriptedJob("after-outage", kind="flaky")], outage)
    assert ledger.transient > 0 and ledger.lists >= 2, "the outage was not noticed"
    after = local.core.read_namespaced_config_map("before", namespace)
    assert after.metadata.uid == before.metadata.uid and after.data == {"k": "v"}
    local.core.create_namespaced_config_map(namespace, {"metadata": {"name": "after"}})
    nodes = local.core.list_node().items
    assert len(nodes) >= 8
    # The kubeconfig on disk still works (kubectl, as the operator and users use it).
    assert "after" in local.kubectl("get", "configmap", "-n", namespace, "-o", "name").stdout


def test_held_pod_stays_terminating_until_released(local: Cluster, namespace: str) -> None:
    pod = bare_pod(local, namespace, "cpu-node-0")
    faults.hold_pod(local, namespace, pod)
    faults.hold_pod(local, namespace, pod)  # idempotent
    podctl.delete(local, namespace, pod)
    time.sleep(3)
    left = podctl.get(local, namespace, pod)
    assert left and left["metadata"].get("deletionTimestamp"), left
    assert left["metadata"]["finalizers"] == [faults.FINALIZER_HOLD]
    faults.release_pod(local, namespace, pod)
    wait_for(lambda: podctl.get(local, namespace, pod) is None, timeout=30, what="pod gone")
    faults.release_pod(local, namespace, pod)  # gone: fine


def run_scripted(
    cluster: Cluster, ns: str, jobs: list[ScriptedJob], outage: Callable[[], None] | None = None
) -> Ledger:
    """Run the jobs with a Kubelet and a Ledger (after ``outage``, if any: a control-plane
    outage while they watch); check the end state; return the Ledger."""
    ledger, kubelet = Ledger(cluster, ns).start(), Kubelet(cluster, ns, jobs).start()
    try:
        if outage is not None:
            outage()
        for job in jobs:
            ddpjobs.apply(cluster, job.manifest(ns))
        phases = run_until_done(cluster, ns, jobs, timeout=120)
        pods = [
            (p["metadata"]["name"], p["status"].get("phase")) for p in podctl.list_pods(cluster, ns)
        ]
        assert phases == {j.name: j.expected_phase for j in jobs}, (pods, kubelet.finished)
        assert verify(cluster, ns, jobs, ledger=ledger) == []
        assert ledger.duplicates() == []
    finally:
        kubelet.stop()
        ledger.stop()
    return ledger


def test_scripted_jobs_with_the_operator(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    jobs = [
        ScriptedJob("ok", kind="succeed", nodes=3),
        ScriptedJob("flaky", kind="flaky"),
        ScriptedJob("bad", kind="fail", backoff_limit=1),
    ]
    ledger = run_scripted(cluster, namespace, jobs)
    seen = {(r.job, r.index, r.attempt) for r in ledger.snapshot()}
    assert seen == {
        *(("ok", i, 0) for i in range(3)),
        *(("flaky", i, a) for i in range(2) for a in range(2)),
        *(("bad", i, a) for i in range(2) for a in range(2)),
    }


def worker(job: str, index: int, attempt: int, uid: str, phase: str = "Running") -> dict:
    labels = {
        "ddp-operator.io/job-name": job,
        "ddp-operator.io/worker-index": str(index),
        "ddp-operator.io/created-in-attempt": str(attempt),
    }
    meta = {"name": f"{job}-worker-{index}", "uid": uid, "labels": labels}
    return {"metadata": meta, "status": {"phase": phase}}


def test_ledger_and_verify_find_what_they_look_for(cluster: Cluster, namespace: str) -> None:
    ledger = Ledger(cluster, namespace)  # not started: fed by hand
    ledger.changed("ADDED", worker("j", 0, 0, "a"))
    ledger.changed("DELETED", worker("j", 0, 0, "a"))
    ledger.changed("ADDED", worker("j", 0, 1, "b"))  # the next attempt: fine
    assert ledger.duplicates() == []
    ledger.changed("ADDED", worker("j", 0, 1, "c"))  # the same attempt again, while b lives
    found = ledger.duplicates()
    assert len(found) == 2 and "2 pods" in found[0] and "live at once" in found[1], found
    ledger.relisted([worker("j", 0, 1, "c", "Succeeded")])  # b gone unseen: ended there
    assert [r.phase for r in ledger.snapshot() if r.uid == "c"] == ["Succeeded"]
    ledger.api.close()

    # A job that is not there, and a pod that claims a job that does not own it.
    fake = worker("ghost", 0, 0, "x")
    fake["metadata"] = {"name": "ghost-worker-0", "labels": fake["metadata"]["labels"]}
    fake["spec"] = {"containers": [{"name": "c", "image": "none"}]}
    del fake["status"]
    cluster.core.create_namespaced_pod(namespace, fake)
    problems = verify(cluster, namespace, [ScriptedJob("ghost")], settle=0)
    assert problems == [
        "pod ghost-worker-0: controller [] is not its job ghost",
        "ghost: not found",
    ]
