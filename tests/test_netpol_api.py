"""The job's NetworkPolicy ``<job>-ddp-isolation`` through the API (any cluster): there before
the first pod, the job's (its controller), none when the job turns isolation off, and a foreign
policy of its name reported (NameConflict), never adopted or deleted. Enforcement:
tests/test_realnode_netpol.py."""

from __future__ import annotations

from datetime import datetime

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from test_ownership import blocked

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def _policy(cluster: Cluster, ns: str, name: str) -> client.V1NetworkPolicy | None:
    try:
        return client.NetworkingV1Api(cluster.api).read_namespaced_network_policy(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_the_job_gets_its_policy_before_its_first_pod(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("iso", namespace, nodes=2))
    running = wait_running(cluster, namespace, "iso", 2)
    policy = _policy(cluster, namespace, "iso-ddp-isolation")
    assert policy is not None
    (ref,) = policy.metadata.owner_references
    assert ref.controller and ref.uid == jobs.get(cluster, namespace, "iso")["metadata"]["uid"]
    assert policy.spec.pod_selector.match_labels == {"ddp-operator.io/job-name": "iso"}
    assert policy.spec.policy_types == ["Ingress"]
    first = min(datetime.fromisoformat(p["metadata"]["creationTimestamp"]) for p in running)
    assert policy.metadata.creation_timestamp <= first


def test_a_job_that_turns_isolation_off_gets_none(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("open", namespace, nodes=2, network={"isolation": False}))
    wait_running(cluster, namespace, "open", 2)
    assert _policy(cluster, namespace, "open-ddp-isolation") is None


def test_a_foreign_policy_is_reported_and_never_adopted(cluster: Cluster, namespace: str) -> None:
    api = client.NetworkingV1Api(cluster.api)
    foreign = api.create_namespaced_network_policy(
        namespace,
        {
            "metadata": {"name": "np-ddp-isolation"},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]},
        },
    )
    jobs.apply(cluster, ddpjob("np", namespace, nodes=2))
    cond = blocked(cluster, namespace, "np", "NameConflict")
    assert (
        "NetworkPolicy np-ddp-isolation" in cond["message"] and "no controller" in cond["message"]
    )
    assert workers(cluster, namespace, "np") == []  # no pod without its policy
    still = _policy(cluster, namespace, "np-ddp-isolation")
    assert still is not None and still.metadata.uid == foreign.metadata.uid
    assert not still.metadata.owner_references and not still.metadata.deletion_timestamp
    api.delete_namespaced_network_policy("np-ddp-isolation", namespace)
    wait_running(cluster, namespace, "np", 2)
    jobs.wait_condition(cluster, namespace, "np", "Blocked", status="False")
    mine = wait_for(
        lambda: _policy(cluster, namespace, "np-ddp-isolation"), what="the job's own policy"
    )
    assert mine.metadata.owner_references[0].kind == "DDPJob"
