"""Every error the operator meets for a job reaches the job: permanent ones fail it at once with
the API's own message and leave no pod behind; transient ones block it, are retried, and clear."""

from __future__ import annotations

import pytest

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def failed(cluster: Cluster, ns: str, name: str, reason: str) -> dict:
    """Wait for Failed=True; check its reason, the Event, and that no pod or Service was left
    behind."""
    job = jobs.wait_condition(cluster, ns, name, "Failed")
    cond = jobs.condition(job, "Failed")
    assert cond["reason"] == reason, cond
    assert job["status"]["phase"] == "Failed"
    jobs.wait_event(cluster, ns, name, reason)
    assert workers(cluster, ns, name) == []
    assert name not in {s.metadata.name for s in cluster.core.list_namespaced_service(ns).items}
    out = cluster.kubectl("get", "ddpj", name, "-n", ns).stdout
    assert "Failed" in out
    return cond


def test_a_template_the_api_server_refuses_fails_the_job_before_any_pod(
    cluster: Cluster, namespace: str
) -> None:
    template = {"spec": {"containers": [{"name": "trainer", "command": ["python"]}]}}
    jobs.apply(cluster, ddpjob("noimage", namespace, nodes=3, template=template))
    cond = failed(cluster, namespace, "noimage", "InvalidPodTemplate")
    assert "spec.containers[0].image: Required value" in cond["message"]
    assert "noimage-worker-0" in cond["message"]


def test_a_podsecurity_violation_fails_the_job_before_any_pod(
    cluster: Cluster, namespace: str
) -> None:
    cluster.core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    jobs.apply(cluster, ddpjob("psa", namespace, nodes=2))
    cond = failed(cluster, namespace, "psa", "PodSecurityViolation")
    assert "violates PodSecurity" in cond["message"]


def test_exceeded_quota_blocks_the_job_until_it_passes(cluster: Cluster, namespace: str) -> None:
    cluster.core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}}}
    )
    wait_for(
        lambda: cluster.core.read_namespaced_resource_quota("q", namespace).status.hard or {},
        what="quota status",
    )
    jobs.apply(cluster, ddpjob("quota", namespace, nodes=2))
    job = jobs.wait_condition(cluster, namespace, "quota", "Blocked")
    cond = jobs.condition(job, "Blocked")
    assert cond["reason"] == "QuotaExceeded" and "exceeded quota: q" in cond["message"]
    jobs.wait_event(cluster, namespace, "quota", "QuotaExceeded")
    assert job["status"]["phase"] == "Pending"
    cluster.core.delete_namespaced_resource_quota("q", namespace)
    wait_running(cluster, namespace, "quota", 2, timeout=90)
    jobs.wait_condition(cluster, namespace, "quota", "Blocked", status="False")
