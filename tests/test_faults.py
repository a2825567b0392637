"""Faults of the cluster and of the operator itself: the job still ends right and says why."""

from __future__ import annotations

import pytest

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from harness.operator import OperatorProcess
from jobs import ddpjob

pytestmark = [pytest.mark.cluster]

HOLD = "ddp-operator.io/test-hold"


@pytest.mark.usefixtures("operator")
def test_a_pod_held_by_a_finalizer_is_named_and_the_group_waits(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("held", namespace, nodes=2))
    wait_running(cluster, namespace, "held", 2)
    cluster.core.patch_namespaced_pod(
        "held-worker-1", namespace, {"metadata": {"finalizers": [HOLD]}}
    )
    pods.finish(cluster, namespace, "held-worker-0", 3)  # a group restart deletes worker 1
    job = jobs.wait_condition(cluster, namespace, "held", "Blocked", timeout=60)
    cond = jobs.condition(job, "Blocked")
    assert cond["reason"] == "PodStuckTerminating"
    assert "held-worker-1" in cond["message"] and HOLD in cond["message"]
    assert job["status"]["phase"] == "Restarting"
    cluster.core.patch_namespaced_pod(
        "held-worker-1", namespace, {"metadata": {"finalizers": None}}
    )
    wait_running(cluster, namespace, "held", 2, attempt=1)
    jobs.wait_condition(cluster, namespace, "held", "Blocked", status="False")


def test_a_watched_namespace_deleted_while_jobs_run(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    seen = len(operator.output())
    prefix = namespace.rsplit("-", 1)[0]
    doomed, later = f"{prefix}-doomed", f"{prefix}-later"
    for ns in (doomed,):
        cluster.core.create_namespace({"metadata": {"name": ns}})
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
    cluster.core.create_namespace({"metadata": {"name": later}})
    try:
        wait_for(lambda: cluster.core.list_namespaced_service_account(later).items)
        jobs.apply(cluster, ddpjob("c", later, nodes=2))
        wait_running(cluster, later, "c", 2)
    finally:
        cluster.core.delete_namespace(later)
    assert operator.proc is not None and operator.proc.poll() is None
    log = operator.output()[seen:]
    assert "Traceback" not in log, log[-3000:]
