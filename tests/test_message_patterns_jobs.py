"""What one job's patterns may cost, with a real API server and operator: rules whose patterns add
up past the job's bound are refused by ``kubectl apply``; a pattern the API server takes but RE2
cannot compile within the operator's bound fails its job, saying which field, and creates
nothing."""

from __future__ import annotations

import pytest

from harness import jobs
from harness.cluster import Cluster
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd")]


def test_patterns_adding_up_past_the_jobs_bound_are_refused_at_apply(
    cluster: Cluster, namespace: str
) -> None:
    rules = [{"action": "FailJob", "onMessagePattern": f"{i}" + "x" * 1000} for i in range(5)]
    body = ddpjob("long", namespace, failurePolicy={"rules": rules})
    result = jobs.apply(cluster, body, check=False)
    assert result.returncode != 0, result.stdout
    assert "spec.failurePolicy.rules" in result.stderr, result.stderr
    assert "must add up to at most 4096 characters" in result.stderr, result.stderr
    assert jobs.get(cluster, namespace, "long") is None
    fits = ddpjob("long", namespace, suspend=True, failurePolicy={"rules": rules[:4]})
    assert jobs.apply(cluster, fits, check=False).returncode == 0


@pytest.mark.usefixtures("operator")
def test_a_pattern_over_the_memory_bound_fails_its_job_naming_the_field(
    cluster: Cluster, namespace: str
) -> None:
    rules = [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}},
        {"name": "letters", "action": "FailJob", "onMessagePattern": "(?i)\\pL{400}"},
    ]
    jobs.apply(cluster, ddpjob("costly", namespace, nodes=2, failurePolicy={"rules": rules}))
    job = jobs.wait_condition(cluster, namespace, "costly", "Failed")
    failed = jobs.condition(job, "Failed") or {}
    said = "spec.failurePolicy.rules[1].onMessagePattern is too large"
    assert failed["reason"] == "InvalidSpec" and said in failed["message"], failed
    (event,) = jobs.wait_event(cluster, namespace, "costly", "InvalidSpec")
    assert said in event["message"] and event["type"] == "Warning", event
    assert not cluster.core.list_namespaced_pod(namespace).items
