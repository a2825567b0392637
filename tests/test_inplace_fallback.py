"""Where a group cannot restart in place, it is recreated, and the job says why: a worker pod
that ended as a whole (here kwok's nodes, which never restart containers: the pod fails), an API
server that refuses what in-place pods carry (a ValidatingAdmissionPolicy stands in for one whose
feature gate is off), and ``restartStrategy: Recreate``. The in-place restart itself needs a
kubelet: tests/test_realnode_inplace.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kubernetes import client

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def _uids(cluster: Cluster, ns: str, job: str) -> list[str]:
    return [p["metadata"]["uid"] for p in jobs.workers(cluster, ns, job)]


def _helpers(pod: dict) -> list[str]:
    """What the operator added to the pod's containers for in-place restarts."""
    return [c["name"] for c in pod["spec"]["containers"] if c["name"].startswith("ddp-")]


def test_a_worker_pod_that_failed_whole_is_recreated_saying_why(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("whole", namespace, nodes=2, restartStrategy="InPlace"))
    first = wait_running(cluster, namespace, "whole", 2)
    assert all(_helpers(p) == ["ddp-attempt-watch"] for p in first)
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
    assert all(not _helpers(p) for p in running), running
    env = {e["name"]: e for e in running[0]["spec"]["containers"][0]["env"]}
    assert env["DDP_ATTEMPT"] == {"name": "DDP_ATTEMPT", "value": "0"}


def test_a_recreate_job_gets_plain_pods(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("plain", namespace, nodes=2, restartStrategy="Recreate"))
    running = wait_running(cluster, namespace, "plain", 2)
    assert all(not _helpers(p) for p in running)
    assert all(
        "ddp-operator.io/attempt" not in (p["metadata"].get("annotations") or {}) for p in running
    )
    pods.finish(cluster, namespace, "plain-worker-0", 1)
    wait_running(cluster, namespace, "plain", 2, attempt=1)
    failed = jobs.wait_event(cluster, namespace, "plain", "WorkerFailed")
    assert all("in place" not in e["message"] for e in failed), failed


@pytest.fixture
def old_node(cluster: Cluster, namespace: str):
    """A Ready kwok node that declares no features (as a kubelet before v1.35 does), tainted so
    that only this test's pods go there; its name."""
    name = f"old-{namespace}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "an older kubelet",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    room = {"cpu": "8", "memory": "16Gi", "pods": "20"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, OLD: namespace},
        },
        "spec": {"taints": [{"key": OLD, "value": namespace, "effect": "NoSchedule"}]},
        "status": {"allocatable": room, "capacity": room, "conditions": [ready]},
    }
    cluster.core.create_node(node)
    try:
        got = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
        assert not got["status"].get("declaredFeatures"), got["status"]
        yield name
    finally:
        cluster.core.delete_node(name)


OLD = "ddp-operator.io/test-old-node"


def test_where_no_node_declares_the_feature_the_job_falls_back_to_recreate_saying_why(
    cluster: Cluster, namespace: str, old_node: str
) -> None:
    """The scheduler finds no node for in-place pods: the job says so (InPlaceRestart=False),
    its pods are built again without, run, and a failure recreates the group."""
    job = ddpjob("old", namespace, nodes=2)  # InPlace, the default
    job["spec"]["template"]["spec"] |= {
        "nodeSelector": {OLD: namespace},
        "tolerations": [{"key": OLD, "operator": "Exists", "effect": "NoSchedule"}],
    }
    jobs.apply(cluster, job)
    done = jobs.wait_condition(cluster, namespace, "old", "InPlaceRestart", status="False")
    cond = jobs.condition(done, "InPlaceRestart")
    assert cond["reason"] == "NodesLackInPlaceRestart", cond
    assert "didn't match Pod's required features" in cond["message"], cond
    assert jobs.wait_event(cluster, namespace, "old", "NodesLackInPlaceRestart")
    running = wait_running(cluster, namespace, "old", 2)
    assert all(not _helpers(p) and p["spec"]["nodeName"] == old_node for p in running), running
    job_now = jobs.get(cluster, namespace, "old")
    assert job_now["status"]["restarts"] == 0, job_now["status"]
    pods.finish(cluster, namespace, "old-worker-1", 3)
    wait_running(cluster, namespace, "old", 2, attempt=1)
    failed = jobs.wait_event(cluster, namespace, "old", "WorkerFailed")
    assert any(
        "not in place: the InPlaceRestart condition says why" in e["message"] for e in failed
    ), failed
