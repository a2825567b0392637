"""Faults of the cluster and of the operator itself: the job still ends right and says why."""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime

import pytest

from harness import faults, jobs, pods, realnode
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from harness.nodes import fake_nodes_namespace
from harness.operator import OperatorProcess
from harness.scenario import KINDS, Kubelet, Ledger, ScriptedJob, run_until_done, verify
from jobs import ddpjob

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def local(cluster: Cluster) -> Cluster:
    """The local cluster, whose nodes and control plane the harness can fault."""
    if not cluster.local:
        pytest.skip("injects faults into the local kwok cluster (hack/cluster/cluster.sh)")
    return cluster


@pytest.mark.usefixtures("operator")
def test_a_pod_held_by_a_finalizer_is_named_and_the_group_waits(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("held", namespace, nodes=2))
    wait_running(cluster, namespace, "held", 2)
    faults.hold_pod(cluster, namespace, "held-worker-1")
    pods.finish(cluster, namespace, "held-worker-0", 3)  # a group restart deletes worker 1
    job = jobs.wait_condition(cluster, namespace, "held", "Blocked", timeout=60)
    cond = jobs.condition(job, "Blocked")
    assert cond["reason"] == "PodStuckTerminating"
    assert "held-worker-1" in cond["message"] and faults.FINALIZER_HOLD in cond["message"]
    assert job["status"]["phase"] == "Restarting"
    faults.release_pod(cluster, namespace, "held-worker-1")
    wait_running(cluster, namespace, "held", 2, attempt=1)
    jobs.wait_condition(cluster, namespace, "held", "Blocked", status="False")


def test_a_watched_namespace_deleted_while_jobs_run(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    seen = len(operator.output())
    prefix = namespace.rsplit("-", 1)[0]
    doomed, later = f"{prefix}-doomed", f"{prefix}-later"
    for ns in (doomed,):
        cluster.core.create_namespace(fake_nodes_namespace(ns))
        wait_for(lambda ns=ns: cluster.core.list_namespaced_service_account(ns).items)
    jobs.apply(cluster, ddpjob("a", doomed, nodes=2))
    jobs.apply(cluster, ddpjob("b", namespace, nodes=2))
    wait_running(cluster, doomed, "a", 2)
    wait_running(cluster, namespace, "b", 2)
    cluster.core.delete_namespace(doomed)
    wait_for(
        lambda: not [n for n in cluster.core.list_namespace().items if n.metadata.name == doomed],
        timeout=90,
        what=f"namespace {doomed} gone",
    )
    # The other namespace's job still ends right, and a namespace created now is watched.
    for w in workers(cluster, namespace, "b"):
        pods.finish(cluster, namespace, w["metadata"]["name"], 0)
    jobs.wait_phase(cluster, namespace, "b", "Succeeded")
    cluster.core.create_namespace(fake_nodes_namespace(later))
    try:
        wait_for(lambda: cluster.core.list_namespaced_service_account(later).items)
        jobs.apply(cluster, ddpjob("c", later, nodes=2))
        wait_running(cluster, later, "c", 2)
    finally:
        cluster.core.delete_namespace(later)
    assert operator.proc is not None and operator.proc.poll() is None
    log = operator.output()[seen:]
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.usefixtures("operator")
def test_a_worker_whose_node_stops_answering_restarts_the_group_elsewhere(
    local: Cluster, namespace: str
) -> None:
    """The node is not deleted: it stops answering. The worker counts as failed once the node is
    lost (unreachable taint + the workers' toleration: the template's 5 s here, kept by the
    builder, instead of its 30 s default), its pod, stuck Terminating with no kubelet to
    confirm, is force-deleted, and the group runs again on other nodes. A disruption: not
    counted against backoffLimit (0: a counted restart would fail the job)."""
    template = ddpjob("lost", namespace)["spec"]["template"]
    template["spec"]["tolerations"] = [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 5,
        }
        for taint in ("unreachable", "not-ready")
    ]
    jobs.apply(local, ddpjob("lost", namespace, nodes=2, backoffLimit=0, template=template))
    ws = wait_running(local, namespace, "lost", 2)
    node = ws[1]["spec"]["nodeName"]
    last_heartbeat = faults.silence_node(local, node)
    try:
        job = jobs.wait_condition(local, namespace, "lost", "Restarting", timeout=180)
        message = jobs.condition(job, "Restarting")["message"]
        assert f"lost-worker-1 was lost with its node {node}" in message
        assert "not counted (a disruption; 1 of 10)" in message, message
        again = wait_running(local, namespace, "lost", 2, attempt=1, timeout=120)
        status = (jobs.get(local, namespace, "lost") or {})["status"]
        assert (status["countedRestarts"], status["uncountedRestarts"]) == (0, 1), status
        assert status["firstFailure"]["reason"] in ("NodeLost", "DeletionByTaintManager")
        recovered = datetime.now(UTC)
        assert all(w["spec"]["nodeName"] != node for w in again)
        assert {w["metadata"]["uid"] for w in again}.isdisjoint(w["metadata"]["uid"] for w in ws)
        took = (recovered - last_heartbeat).total_seconds()
        print(f"lost node {node}: last heartbeat -> whole group running again: {took:.1f}s")
    finally:
        faults.revive_node(local, node)


@pytest.mark.serial
def test_control_plane_down_and_back_under_a_running_operator(
    local: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """etcd and the API server (the whole control plane) stop for 20 s; every job converges.
    And where the real nodes run, they act at once after it: cluster.sh start restarts their
    kubelets and CoreDNS, whose watches, backing off through the outage, caught up up to a minute
    later (CoreDNS answered a new Service's names NXDOMAIN for 40 s; a kubelet started a new pod
    56 s after it was bound)."""
    for name in ("cp-ok", "cp-fail"):
        jobs.apply(local, ddpjob(name, namespace, nodes=2))
        wait_running(local, namespace, name, 2)
    with faults.control_plane_down(local, 20):
        pass
    if any(n.metadata.name == realnode.NODE for n in local.core.list_node().items):
        spec = {"ports": [{"port": 80}], "selector": {"app": "none"}}
        local.core.create_namespaced_service(
            namespace, {"metadata": {"name": "after"}, "spec": spec}
        )
        name = f"after.{namespace}.svc.cluster.local"
        wait_for(lambda: realnode.cluster_dns_knows(name), timeout=10, what=f"{name} in DNS")
        own = f"after-{uuid.uuid4().hex[:6]}"  # a namespace whose pods may go to a real node
        local.core.create_namespace({"metadata": {"name": own}})
        try:
            wait_for(lambda: local.core.list_namespaced_service_account(own).items, what="sa")
            image = realnode.realnode("image")
            local.core.create_namespaced_pod(own, realnode.pod_on_real_node("p", image, ["true"]))
            pods.wait_phase(local, own, "p", "Succeeded", timeout=20)
        finally:
            local.core.delete_namespace(own, propagation_policy="Background")
    for w in workers(local, namespace, "cp-ok"):
        pods.finish(local, namespace, w["metadata"]["name"], 0)
    pods.finish(local, namespace, "cp-fail-worker-1", 3)
    jobs.apply(local, ddpjob("cp-new", namespace, nodes=2))
    jobs.wait_phase(local, namespace, "cp-ok", "Succeeded", timeout=120)
    wait_running(local, namespace, "cp-fail", 2, attempt=1, timeout=120)
    wait_running(local, namespace, "cp-new", 2, timeout=120)
    assert operator.proc is not None and operator.proc.poll() is None


def test_operator_sigkilled_every_few_seconds_through_50_jobs(cluster: Cluster, crd: str) -> None:
    """50 jobs (successes, restarts, failures) while the operator is SIGKILLed every 2.5-5 s
    (12 times, or until they end): each job ends right, with exactly its own pods and a status
    that matches them, and no worker was ever created twice in one attempt."""
    ns = f"ddpk-{uuid.uuid4().hex[:6]}"  # outside the session operator's namespaces
    cluster.core.create_namespace(fake_nodes_namespace(ns))
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, what="sa")
    # A failing job runs 3 attempts of 6 s or more: 18 s, longer than the first three kills can
    # take (15 s), however fast the operator; the others end sooner, spreading their restarts.
    rng = random.Random(50)
    scripted = [
        ScriptedJob(f"j{i}", kind=k, run_seconds=6 if k == "fail" else rng.uniform(0.5, 4))
        for i, k in ((i, KINDS[i % 3]) for i in range(50))
    ]
    ledger, kubelet = Ledger(cluster, ns).start(), Kubelet(cluster, ns, scripted).start()
    operator = OperatorProcess(cluster, ns).start()
    kills = 0
    try:
        operator.wait_ready()
        for job in scripted:
            cluster.custom.create_namespaced_custom_object(
                jobs.GROUP, jobs.VERSION, ns, jobs.PLURAL, job.manifest(ns)
            )
        while kills < 12:  # then it runs undisturbed to the end
            time.sleep(rng.uniform(2.5, 5))
            if all(
                p in ("Succeeded", "Failed")
                for p in run_until_done(cluster, ns, scripted, 0).values()
            ):
                break
            operator.kill()
            kills += 1
            operator = OperatorProcess(cluster, ns).start()
        phases = run_until_done(cluster, ns, scripted, timeout=180)
        problems = verify(cluster, ns, scripted)
        duplicates = ledger.duplicates()
        kubelet.check()
        ledger.check()
    finally:
        operator.kill()
        kubelet.stop()
        ledger.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")
    outcomes = sorted(phases.values())
    print(f"{kills} SIGKILLs; outcomes {dict((p, outcomes.count(p)) for p in set(outcomes))}")
    assert kills >= 3, "the jobs finished before the operator was killed three times"
    assert not problems, "\n".join(problems)
    assert not duplicates, "workers created twice in one attempt:\n" + "\n".join(duplicates)
