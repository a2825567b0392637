"""Where a group cannot restart in place, it is recreated, and the job says why: a worker pod
that ended as a whole (here kwok's nodes, which never restart containers: the pod fails), an API
server that refuses what in-place pods carry (a ValidatingAdmissionPolicy stands in for one whose
feature gate is off), and ``restartStrategy: Recreate``. The in-place restart itself needs a
kubelet: tests/test_realnode_inplace.py."""

from __future__ import annotations

import pytest
from kubernetes import client

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def _uids(cluster: Cluster, ns: str, job: str) -> list[str]:
    return [p["metadata"]["uid"] for p in jobs.workers(cluster, ns, job)]


def _inits(pod: dict) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers") or []]


def test_a_worker_pod_that_failed_whole_is_recreated_saying_why(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("whole", namespace, nodes=2, restartStrategy="InPlace"))
    first = wait_running(cluster, namespace, "whole", 2)
    assert all(_inits(p)[:2] == ["ddp-attempt-gate", "ddp-attempt-watch"] for p in first)
    pods.finish(cluster, namespace, "whole-worker-1", 3)
    wait_running(cluster, namespace, "whole", 2, attempt=1)
    assert not set(_uids(cluster, namespace, "whole")) & {p["metadata"]["uid"] for p in first}
    failed = jobs.wait_event(cluster, namespace, "whole", "WorkerFailed")
    assert any("not in place: whole-worker-1 has ended (Failed)" in e["message"] for e in failed), (
        failed
    )


POLICY = "ddpt-no-restart-rules"


@pytest.fixture
def refusing(cluster: Cluster, namespace: str):
    """An API server that refuses pods with container restart rules in ``namespace``."""
    admission = client.AdmissionregistrationV1Api(cluster.api)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "object.spec.containers.all(c, !has(c.restartPolicyRules))",
                    "message": "spec.containers[0].restartPolicyRules: Forbidden: not here",
                    "reason": "Invalid",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(POLICY)
        admission.delete_validating_admission_policy(POLICY)


def test_an_api_server_refusing_in_place_pods_gets_recreated_ones_and_the_job_says_why(
    cluster: Cluster, namespace: str, refusing: None
) -> None:
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "restartPolicy": "Never",
                    "restartPolicyRules": [
                        {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}
                    ],
                }
            ]
        },
    }

    def refused() -> bool:  # the policy takes effect within a second or so
        try:
            cluster.core.create_namespaced_pod(namespace, probe, dry_run="All")
        except Exception:
            return True
        return False

    wait_for(refused, timeout=30, what="the policy to refuse restart rules")
    jobs.apply(cluster, ddpjob("refused", namespace, nodes=2, restartStrategy="InPlace"))
    job = jobs.wait_condition(cluster, namespace, "refused", "InPlaceRestart", status="False")
    cond = jobs.condition(job, "InPlaceRestart")
    assert cond["reason"] == "InPlaceUnsupported"
    assert "restartPolicyRules: Forbidden: not here" in cond["message"], cond
    assert jobs.wait_event(cluster, namespace, "refused", "InPlaceUnsupported")
    running = wait_running(cluster, namespace, "refused", 2)
    assert all(not _inits(p) for p in running), running
    env = {e["name"]: e for e in running[0]["spec"]["containers"][0]["env"]}
    assert env["DDP_ATTEMPT"] == {"name": "DDP_ATTEMPT", "value": "0"}


def test_a_recreate_job_gets_plain_pods(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("plain", namespace, nodes=2, restartStrategy="Recreate"))
    running = wait_running(cluster, namespace, "plain", 2)
    assert all(not _inits(p) for p in running)
    assert all(
        "ddp-operator.io/attempt" not in (p["metadata"].get("annotations") or {}) for p in running
    )
    pods.finish(cluster, namespace, "plain-worker-0", 1)
    wait_running(cluster, namespace, "plain", 2, attempt=1)
    failed = jobs.wait_event(cluster, namespace, "plain", "WorkerFailed")
    assert all("in place" not in e["message"] for e in failed), failed
