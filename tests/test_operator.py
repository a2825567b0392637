"""The operator on a real API server: objects, env, statuses, restarts, clean-up."""

from __future__ import annotations

import pytest

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from harness.nodes import fake_nodes_namespace
from harness.operator import OperatorProcess
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def test_job_gets_a_headless_service_then_wired_workers(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("wire", namespace, nodes=3))
    ws = wait_running(cluster, namespace, "wire", 3)
    svc = cluster.core.read_namespaced_service("wire", namespace)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True
    assert svc.spec.selector == {"ddp-operator.io/job-name": "wire"}
    # The Service was written before any pod (etcd revisions are ordered).
    assert all(
        int(svc.metadata.resource_version) < int(w["metadata"]["resourceVersion"]) for w in ws
    )
    job = jobs.get(cluster, namespace, "wire")
    for i, w in enumerate(ws):
        assert w["metadata"]["name"] == f"wire-worker-{i}"
        assert w["spec"]["hostname"] == f"wire-worker-{i}" and w["spec"]["subdomain"] == "wire"
        owner = w["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "DDPJob",
            job["metadata"]["uid"],
            True,
        )
        e = pods.trainer_env(cluster, w)
        assert e["MASTER_ADDR"] == "wire-worker-0.wire" and e["NODE_RANK"] == str(i)
        assert e["WORLD_SIZE"] == "3" and e["RANK"] == str(i) and e["DDP_BACKEND"] == "gloo"
        assert any(m["mountPath"] == "/dev/shm" for m in w["spec"]["containers"][0]["volumeMounts"])
    job = jobs.wait_phase(cluster, namespace, "wire", "Running")
    assert job["status"]["workers"]["running"] == 3 and job["status"]["restarts"] == 0
    assert job["status"]["observedGeneration"] == job["metadata"]["generation"]
    # Events are posted after the status is written: wait for them.
    wait_for(
        lambda: (
            {"WorkersCreated", "AllWorkersRunning"}
            <= {e["reason"] for e in jobs.events(cluster, namespace, "wire")}
        ),
        timeout=10,
        what="the WorkersCreated and AllWorkersRunning Events",
    )
    out = cluster.kubectl("get", "ddpj", "-n", namespace).stdout
    assert "PHASE" in out and "RESTARTS" in out and "Running" in out


def test_all_workers_exit_zero_succeeds(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("ok", namespace, nodes=2))
    for w in wait_running(cluster, namespace, "ok", 2):
        pods.finish(cluster, namespace, w["metadata"]["name"], 0)
    job = jobs.wait_condition(cluster, namespace, "ok", "Succeeded")
    assert job["status"]["phase"] == "Succeeded" and job["status"]["completionTime"]
    assert job["status"]["workers"]["succeeded"] == 2
    assert jobs.condition(job, "Running")["status"] == "False"


def test_failed_worker_restarts_group_then_job_fails(cluster: Cluster, namespace: str) -> None:
    job = ddpjob("flaky", namespace, nodes=3, backoffLimit=1, restartStrategy="Recreate")
    jobs.apply(cluster, job)  # kwok fails pods whole: recreated either way; here, plain pods
    first = wait_running(cluster, namespace, "flaky", 3)
    pods.finish(cluster, namespace, "flaky-worker-2", 3)
    second = wait_running(cluster, namespace, "flaky", 3, attempt=1)
    assert {w["metadata"]["uid"] for w in second}.isdisjoint({w["metadata"]["uid"] for w in first})
    job = jobs.get(cluster, namespace, "flaky")
    assert job["status"]["restarts"] == 1
    restart = jobs.wait_event(cluster, namespace, "flaky", "WorkerFailed")
    assert "flaky-worker-2 exited with code 3" in restart[0]["message"]
    assert restart[0]["type"] == "Warning"
    assert pods.trainer_env(cluster, second[0])["DDP_ATTEMPT"] == "1"

    pods.finish(cluster, namespace, "flaky-worker-0", 7)
    job = jobs.wait_condition(cluster, namespace, "flaky", "Failed")
    cond = jobs.condition(job, "Failed")
    assert cond["reason"] == "BackoffLimitExceeded" and "exited with code 7" in cond["message"]
    # The workers still running were stopped; the failed one is kept for its logs.
    wait_for(
        lambda: (
            [w["metadata"]["name"] for w in workers(cluster, namespace, "flaky")]
            == ["flaky-worker-0"]
        ),
        timeout=30,
        what="running workers to be stopped",
    )


def test_deleted_worker_restarts_group(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("del", namespace, nodes=2))
    wait_running(cluster, namespace, "del", 2)
    pods.delete(cluster, namespace, "del-worker-1")
    wait_running(cluster, namespace, "del", 2, attempt=1)
    failed = jobs.wait_event(cluster, namespace, "del", "WorkerFailed")
    # Seen either while its deletion is pending or once it is gone, as timing has it.
    message = failed[0]["message"]
    assert len(failed) == 1
    assert "del-worker-1 was deleted" in message or "del-worker-1 is being deleted" in message
    assert jobs.get(cluster, namespace, "del")["status"]["restarts"] == 1


def test_node_loss_restarts_group(cluster: Cluster, namespace: str, pool: str) -> None:
    """On the test's own pool of fake nodes: losing one disturbs no other test, and nothing that
    registers the cluster's fake nodes again (`make demo` beside it) brings it back."""
    jobs.apply(cluster, ddpjob("lost", namespace, nodes=2, template=pods.on_pool(pool)))
    ws = wait_running(cluster, namespace, "lost", 2)
    node = ws[1]["spec"]["nodeName"]
    pods.lose_node(cluster, node)
    again = wait_running(cluster, namespace, "lost", 2, attempt=1, timeout=150)
    assert node not in {w["spec"]["nodeName"] for w in again}


def test_active_deadline_fails_the_job(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("late", namespace, nodes=2, activeDeadlineSeconds=3))
    wait_running(cluster, namespace, "late", 2)
    job = jobs.wait_condition(cluster, namespace, "late", "Failed", timeout=30)
    assert jobs.condition(job, "Failed")["reason"] == "DeadlineExceeded"
    wait_for(lambda: not workers(cluster, namespace, "late"), timeout=30, what="workers stopped")


def test_suspend_and_resume(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("nap", namespace, nodes=2))
    wait_running(cluster, namespace, "nap", 2)
    jobs.apply(cluster, ddpjob("nap", namespace, nodes=2, suspend=True))
    job = jobs.wait_condition(cluster, namespace, "nap", "Suspended")
    assert job["status"]["phase"] == "Suspended"
    wait_for(lambda: not workers(cluster, namespace, "nap"), timeout=30, what="pods deleted")
    jobs.apply(cluster, ddpjob("nap", namespace, nodes=2, suspend=False))
    wait_running(cluster, namespace, "nap", 2)
    job = jobs.wait_phase(cluster, namespace, "nap", "Running")
    assert job["status"]["restarts"] == 0  # a suspension is not a failure
    assert jobs.condition(job, "Suspended")["reason"] == "Resumed"


def test_deleting_the_job_removes_everything(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("bye", namespace, nodes=2))
    wait_running(cluster, namespace, "bye", 2)
    cluster.kubectl("delete", "ddpjob", "bye", "-n", namespace)
    wait_for(lambda: not workers(cluster, namespace, "bye"), timeout=60, what="pods collected")
    wait_for(
        lambda: not cluster.core.list_namespaced_service(namespace).items, timeout=60, what="svc"
    )


def test_ttl_after_finished_deletes_the_job(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("brief", namespace, nodes=1, ttlSecondsAfterFinished=3))
    ws = wait_running(cluster, namespace, "brief", 1)
    pods.finish(cluster, namespace, ws[0]["metadata"]["name"], 0)
    jobs.wait_condition(cluster, namespace, "brief", "Succeeded")
    wait_for(lambda: jobs.get(cluster, namespace, "brief") is None, timeout=30, what="TTL deletion")


@pytest.mark.parametrize(
    ("resource", "label"), [("nvidia.com/gpu", "nvidia"), ("huawei.com/Ascend910", "ascend")]
)
def test_accelerator_jobs_land_on_matching_nodes(
    cluster: Cluster, namespace: str, resource: str, label: str
) -> None:
    if not cluster.local:
        pytest.skip("relies on the local cluster's fake accelerator nodes")
    jobs.apply(
        cluster, ddpjob("acc", namespace, nodes=2, accelerator={"resource": resource, "perNode": 8})
    )
    ws = wait_running(cluster, namespace, "acc", 2)
    nodes = {w["spec"]["nodeName"] for w in ws}
    assert len(nodes) == 2  # 8 devices each: one worker per node
    for node in nodes:
        assert cluster.core.read_node(node).metadata.labels["ddp-operator.io/accelerator"] == label
    for w in ws:
        assert w["spec"]["containers"][0]["resources"]["limits"][resource] == "8"
        e = pods.trainer_env(cluster, w)
        assert e["WORLD_SIZE"] == "16" and e["NPROC_PER_NODE"] == "8"
        assert e["DDP_BACKEND"] == ("nccl" if label == "nvidia" else "hccl")


def test_unschedulable_job_says_why(cluster: Cluster, namespace: str) -> None:
    jobs.apply(
        cluster,
        ddpjob(
            "huge", namespace, nodes=2, accelerator={"resource": "nvidia.com/gpu", "perNode": 16}
        ),
    )
    job = jobs.wait_condition(cluster, namespace, "huge", "Unschedulable")
    message = jobs.condition(job, "Unschedulable")["message"]
    assert "nvidia.com/gpu" in message and "huge-worker-" in message
    assert job["status"]["phase"] == "Pending"
    wait_for(
        lambda: any(
            e["reason"] == "Unschedulable" for e in jobs.events(cluster, namespace, "huge")
        ),
        timeout=10,
        what="the Unschedulable Event",
    )


def test_operator_killed_mid_creation_converges(cluster: Cluster, crd: str) -> None:
    """A 100-worker job whose operator is SIGKILLed while creating pods ends with exactly 100."""
    ns = "ddpk-" + __import__("uuid").uuid4().hex[:6]
    cluster.core.create_namespace(fake_nodes_namespace(ns))
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, timeout=30, what="sa")
    # A low API concurrency makes creation slow enough to be interrupted.
    first = OperatorProcess(cluster, ns, "--api-concurrency", "2").start()
    try:
        first.wait_ready()
        jobs.apply(cluster, ddpjob("big", ns, nodes=100))
        created = wait_for(
            lambda: len(c := workers(cluster, ns, "big")) >= 5 and c,
            timeout=60,
            interval=0.05,
            what="creation to start",
        )
        first.kill()
        interrupted_at = len(workers(cluster, ns, "big"))
        second = OperatorProcess(cluster, ns).start()
        try:
            ws = wait_running(cluster, ns, "big", 100, timeout=180)
        finally:
            second.stop()
        assert len(created) < 100 and interrupted_at < 100, "the kill came after creation finished"
        names = sorted(w["metadata"]["name"] for w in ws)
        assert names == sorted(f"big-worker-{i}" for i in range(100))
        assert len(cluster.core.list_namespaced_service(ns).items) == 1
        job = jobs.wait_phase(cluster, ns, "big", "Running")
        assert job["status"]["restarts"] == 0 and job["status"]["workers"]["running"] == 100
    finally:
        first.kill()
        cluster.core.delete_namespace(ns, propagation_policy="Background")
