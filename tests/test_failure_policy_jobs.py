"""The failure policy with a real API server and operator, on the fake nodes: disruptions do not
count (a worker evicted through the Eviction API restarts the group without counting against
``backoffLimit``, 0 here: any counted restart would fail the job), and an elastic job's worker
that fails every time is replaced up to ``maxReplacements``, then gets the group decision."""

from __future__ import annotations

import pytest
from kubernetes import client

from ddp_operator.sdk import Client, JobFailed

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster]


def evict(cluster: Cluster, ns: str, name: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    cluster.core.create_namespaced_pod_eviction(name, ns, body)


@pytest.mark.usefixtures("operator")
def test_an_evicted_worker_restarts_the_group_without_counting(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("evicted", namespace, nodes=2, backoffLimit=0))
    wait_running(cluster, namespace, "evicted", 2)
    evict(cluster, namespace, "evicted-worker-1")
    job = jobs.wait_condition(cluster, namespace, "evicted", "Restarting", timeout=60)
    message = jobs.condition(job, "Restarting")["message"]
    assert "evicted-worker-1" in message and "EvictionByEvictionAPI" in message, message
    assert "not counted (a disruption; 1 of 10)" in message, message
    again = wait_running(cluster, namespace, "evicted", 2, attempt=1, timeout=90)
    for w in again:
        pods.finish(cluster, namespace, w["metadata"]["name"], 0)
    done = jobs.wait_phase(cluster, namespace, "evicted", "Succeeded", timeout=60)
    status = done["status"]
    assert (status["restarts"], status["countedRestarts"], status["uncountedRestarts"]) == (
        1,
        0,
        1,
    ), status
    first = status["firstFailure"]
    assert first["worker"] == 1 and first["reason"] == "EvictionByEvictionAPI", first
    assert first["action"] == "RestartGroupNotCounted" and first["rule"] == "default", first
    assert not [
        w for w in workers(cluster, namespace, "evicted") if w["status"]["phase"] == "Failed"
    ]


@pytest.mark.usefixtures("operator")
def test_an_elastic_worker_failing_every_time_is_replaced_up_to_the_bound(
    cluster: Cluster, namespace: str
) -> None:
    spec = {"minNodes": 2, "maxNodes": 4, "backoffLimit": 0}
    spec["failurePolicy"] = {"maxReplacements": 2}
    jobs.apply(cluster, ddpjob("flaky", namespace, nodes=3, **spec))
    for replaced in (1, 2):
        wait_running(cluster, namespace, "flaky", 3, timeout=60)
        pods.finish(cluster, namespace, "flaky-worker-2", 1)
        wait_for(
            lambda n=replaced: (
                (jobs.get(cluster, namespace, "flaky") or {}).get("status", {}).get("replacements")
                == n
            ),
            timeout=60,
            what=f"replacement {replaced}",
        )
    wait_running(cluster, namespace, "flaky", 3, timeout=60)
    pods.finish(cluster, namespace, "flaky-worker-2", 1)
    done = jobs.wait_phase(cluster, namespace, "flaky", "Failed", timeout=60)
    message = jobs.condition(done, "Failed")["message"]
    assert message.startswith("flaky-worker-2 exited with code 1 (Error)"), message
    assert message.endswith("not alone: maxReplacements (2) reached"), message
    assert done["status"]["replacements"] == 2 and done["status"]["restarts"] == 0
    replaced = [
        e for e in jobs.events(cluster, namespace, "flaky") if e["reason"] == "WorkerReplaced"
    ]
    assert len(replaced) == 2, replaced


@pytest.mark.usefixtures("operator")
def test_a_fail_job_rule_ends_the_job_and_the_sdk_carries_the_first_failure(
    cluster: Cluster, namespace: str
) -> None:
    rule = {"name": "usage", "action": "FailJob"}
    rule["onExitCodes"] = {"operator": "In", "values": [2]}
    body = ddpjob("usage", namespace, nodes=2, backoffLimit=5, failurePolicy={"rules": [rule]})
    jobs.apply(cluster, body)
    wait_running(cluster, namespace, "usage", 2)
    pods.finish(cluster, namespace, "usage-worker-1", 2)
    client = Client(namespace=namespace, kubeconfig=str(cluster.kubeconfig))
    with pytest.raises(JobFailed, match="failurePolicy rule usage says FailJob") as failed:
        client.wait("usage", timeout=60)
    first = failed.value.first_failure
    assert (first["worker"], first["exitCode"], first["rule"]) == (1, 2, "usage"), first
    assert (jobs.get(cluster, namespace, "usage") or {})["status"]["restarts"] == 0


@pytest.mark.usefixtures("operator")
def test_a_pathological_pattern_holds_up_no_other_job(cluster: Cluster, namespace: str) -> None:
    """``(a+)+b`` passes the API server's check; a backtracking engine would take days on the
    4,000 ``a`` of this worker's message, and every job of the operator would wait. Matched by
    RE2, the rule simply does not match (the default decides), and a job applied just after
    comes up as any job does."""
    rule = {"name": "catastrophic", "action": "FailJob", "onMessagePattern": "(a+)+b"}
    spec = {"backoffLimit": 1, "failurePolicy": {"rules": [rule]}}
    jobs.apply(cluster, ddpjob("evil", namespace, nodes=1, **spec))
    wait_running(cluster, namespace, "evil", 1)
    pods.finish(cluster, namespace, "evil-worker-0", 1, via="status", message="a" * 4000)
    jobs.apply(cluster, ddpjob("bystander", namespace, nodes=2))
    wait_running(cluster, namespace, "bystander", 2)
    # Counted, not Restarting=True: the restart can be over while the bystander comes up.
    restarted = wait_for(
        lambda: (
            (job := jobs.get(cluster, namespace, "evil"))
            and job.get("status", {}).get("restarts", 0) >= 1
            and job
        ),
        timeout=60,
        what="evil's restart counted",
    )
    first = restarted["status"]["firstFailure"]
    assert (first["rule"], first["action"]) == ("default", "RestartGroup"), first
