"""Objects with the job's names that are not the job's: reported on the job, never adopted,
reused or deleted; pods of an earlier job of the same name never count for the new one."""

from __future__ import annotations

import pytest
from kubernetes import client

from ddp_operator.manifests import worker_env
from ddp_operator.model.jobspec import resolve

from harness import faults, jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def blocked(cluster: Cluster, ns: str, name: str, reason: str) -> dict:
    """Wait for Blocked=True with this reason; return the condition."""
    cond = wait_for(
        lambda: (
            (c := jobs.condition(jobs.get(cluster, ns, name), "Blocked"))
            and c["status"] == "True"
            and c["reason"] == reason
            and c
        ),
        timeout=60,
        what=f"{name} Blocked/{reason}",
    )
    jobs.wait_event(cluster, ns, name, reason)
    return cond


def test_a_foreign_service_is_reported_and_never_used(cluster: Cluster, namespace: str) -> None:
    cluster.core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "svc"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
    )
    jobs.apply(cluster, ddpjob("svc", namespace, nodes=2))
    cond = blocked(cluster, namespace, "svc", "NameConflict")
    assert "Service svc" in cond["message"] and "no controller" in cond["message"]
    job = jobs.get(cluster, namespace, "svc")
    assert job["status"]["phase"] == "Pending" and workers(cluster, namespace, "svc") == []
    svc = cluster.core.read_namespaced_service("svc", namespace)
    assert svc.spec.cluster_ip != "None" and not svc.metadata.owner_references  # untouched
    cluster.core.delete_namespaced_service("svc", namespace)
    wait_running(cluster, namespace, "svc", 2)
    jobs.wait_condition(cluster, namespace, "svc", "Blocked", status="False")
    svc = cluster.core.read_namespaced_service("svc", namespace)
    assert svc.spec.cluster_ip == "None" and svc.metadata.owner_references[0].kind == "DDPJob"


def test_a_foreign_pod_with_a_worker_name_is_reported_and_left_alone(
    cluster: Cluster, namespace: str
) -> None:
    stranger = cluster.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "fp-worker-1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    jobs.apply(cluster, ddpjob("fp", namespace, nodes=2))
    cond = blocked(cluster, namespace, "fp", "NameConflict")
    assert "fp-worker-1" in cond["message"] and "no controller" in cond["message"]
    assert jobs.get(cluster, namespace, "fp")["status"]["phase"] == "Pending"
    still = pods.get(cluster, namespace, "fp-worker-1")
    assert still["metadata"]["uid"] == stranger.metadata.uid
    assert not still["metadata"].get("deletionTimestamp")
    cluster.core.delete_namespaced_pod("fp-worker-1", namespace)
    wait_running(cluster, namespace, "fp", 2)
    jobs.wait_condition(cluster, namespace, "fp", "Blocked", status="False")


def run_to_success(cluster: Cluster, ns: str, name: str) -> str:
    """Apply a 2-worker job and finish it; returns its UID."""
    jobs.apply(cluster, ddpjob(name, ns, nodes=2))
    for w in wait_running(cluster, ns, name, 2):
        pods.finish(cluster, ns, w["metadata"]["name"], 0)
    return jobs.wait_phase(cluster, ns, name, "Succeeded")["metadata"]["uid"]


def owners(cluster: Cluster, ns: str, name: str) -> set[str]:
    """Controller UIDs of the pods labelled with the job's name ("" for none)."""
    return {
        next((r["uid"] for r in w["metadata"].get("ownerReferences") or []), "")
        for w in workers(cluster, ns, name)
    }


def test_a_recreated_job_never_counts_orphaned_pods(cluster: Cluster, namespace: str) -> None:
    first = run_to_success(cluster, namespace, "again")
    cluster.kubectl("delete", "ddpj", "again", "-n", namespace, "--cascade=orphan")
    wait_for(lambda: owners(cluster, namespace, "again") == {""}, what="orphaned pods")
    jobs.apply(cluster, ddpjob("again", namespace, nodes=2))
    cond = blocked(cluster, namespace, "again", "NameConflict")
    assert "pod again-worker-0" in cond["message"] and "no controller" in cond["message"]
    job = jobs.get(cluster, namespace, "again")
    assert job["metadata"]["uid"] != first and job["status"]["phase"] == "Pending"
    assert jobs.condition(job, "Succeeded") is None
    # The orphaned Service is not the new job's either: said once the pods are gone.
    for w in workers(cluster, namespace, "again"):
        pods.delete(cluster, namespace, w["metadata"]["name"])
    cond = blocked(cluster, namespace, "again", "NameConflict")
    # Nor are the orphaned ConfigMaps (in-place pods take DDP_ATTEMPT from one, every pod its
    # common values from the other: the same name, for the same values) and NetworkPolicy: each
    # is named in turn, and nothing runs until it is gone.
    networking = client.NetworkingV1Api(cluster.api)
    common = worker_env.name(resolve(ddpjob("again", namespace, nodes=2)))
    for kind, name, delete in (
        ("Service", "again", cluster.core.delete_namespaced_service),
        ("ConfigMap", "again-ddp-env", cluster.core.delete_namespaced_config_map),
        ("ConfigMap", common, cluster.core.delete_namespaced_config_map),
        ("NetworkPolicy", "again-ddp-isolation", networking.delete_namespaced_network_policy),
    ):
        wait_for(
            lambda what=f"{kind} {name}": (
                what in jobs.condition(jobs.get(cluster, namespace, "again"), "Blocked")["message"]
            ),
            what=f"the orphaned {kind} named",
        )
        assert workers(cluster, namespace, "again") == []
        delete(name, namespace)
    ws = wait_running(cluster, namespace, "again", 2)
    assert owners(cluster, namespace, "again") == {job["metadata"]["uid"]}
    for w in ws:
        pods.finish(cluster, namespace, w["metadata"]["name"], 0)
    jobs.wait_phase(cluster, namespace, "again", "Succeeded")


def test_a_recreated_job_waits_for_the_previous_jobs_pods_to_go(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("prev", namespace, nodes=2))
    names = [w["metadata"]["name"] for w in wait_running(cluster, namespace, "prev", 2)]
    first = jobs.get(cluster, namespace, "prev")["metadata"]["uid"]
    for name in names:  # garbage collection lags: the old pods stay Terminating a while
        faults.hold_pod(cluster, namespace, name)
    cluster.kubectl("delete", "ddpj", "prev", "-n", namespace, "--wait=false")
    wait_for(
        lambda: all(
            w["metadata"].get("deletionTimestamp") for w in workers(cluster, namespace, "prev")
        ),
        what="old pods terminating",
    )
    jobs.apply(cluster, ddpjob("prev", namespace, nodes=2))
    cond = blocked(cluster, namespace, "prev", "WaitingForPreviousJob")
    assert f"DDPJob/prev (uid {first})" in cond["message"]
    assert owners(cluster, namespace, "prev") == {first}  # nothing new, nothing taken over
    for name in names:
        faults.release_pod(cluster, namespace, name)
    wait_running(cluster, namespace, "prev", 2)
    uid = jobs.get(cluster, namespace, "prev")["metadata"]["uid"]
    assert uid != first and owners(cluster, namespace, "prev") == {uid}
    jobs.wait_condition(cluster, namespace, "prev", "Blocked", status="False")
