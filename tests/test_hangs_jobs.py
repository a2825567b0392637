"""Stall detection with a real API server and operator, on the fake nodes (the reports are
written to ``status.progress`` by the test, as the operator's progress endpoint writes them): a
job whose step stops advancing is restarted, one that never reports beside it is not, and a
resumed job's clock starts again at its resumption, not at its last report before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harness import jobs
from harness.cluster import Cluster
from harness.jobs import wait_running
from jobs import ddpjob

pytestmark = [pytest.mark.cluster]
GROUP, VERSION, PLURAL = "ddp-operator.io", "v1alpha1", "ddpjobs"


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def reported(cluster: Cluster, ns: str, name: str, step: int, advanced: datetime) -> None:
    """What the progress endpoint writes for a report of ``step`` in attempt 0."""
    progress = {"step": step, "attempt": 0, "updated": stamp(advanced), "advanced": stamp(advanced)}
    cluster.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, name, {"status": {"progress": progress}}
    )


def running_since(job: dict) -> datetime:
    return datetime.fromisoformat(jobs.condition(job, "Running")["lastTransitionTime"])


@pytest.mark.usefixtures("operator")
def test_a_job_whose_step_stops_is_restarted_and_one_that_never_reports_is_not(
    cluster: Cluster, namespace: str
) -> None:
    for name in ("stuck", "silent"):
        jobs.apply(cluster, ddpjob(name, namespace, nodes=2, stallDetection={"timeoutSeconds": 30}))
    for name in ("stuck", "silent"):
        wait_running(cluster, namespace, name, 2)
    for name in ("stuck", "silent"):  # so that silent runs before stuck's report
        jobs.wait_condition(cluster, namespace, name, "Running")
    reported(cluster, namespace, "stuck", 7, datetime.now(UTC))
    stuck = jobs.wait_condition(cluster, namespace, "stuck", "Restarting", timeout=90)
    assert "has not advanced from 7" in jobs.condition(stuck, "Restarting")["message"]
    silent = jobs.get(cluster, namespace, "silent") or {}
    assert (datetime.now(UTC) - running_since(silent)).total_seconds() >= 30  # as long, or longer
    assert silent["status"]["phase"] == "Running" and silent["status"]["restarts"] == 0, silent


@pytest.mark.usefixtures("operator")
def test_a_resumed_job_is_not_stalled_by_the_time_it_spent_suspended(
    cluster: Cluster, namespace: str
) -> None:
    body = ddpjob("paused", namespace, nodes=2, stallDetection={"timeoutSeconds": 30})
    jobs.apply(cluster, body)
    wait_running(cluster, namespace, "paused", 2)
    patch = {"spec": {"suspend": True}}
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "paused", patch
    )
    jobs.wait_phase(cluster, namespace, "paused", "Suspended")
    # Its last report, 10 minutes old by the time it resumes.
    reported(cluster, namespace, "paused", 40, datetime.now(UTC) - timedelta(minutes=10))
    patch = {"spec": {"suspend": False}}
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "paused", patch
    )
    wait_running(cluster, namespace, "paused", 2)
    resumed = jobs.wait_phase(cluster, namespace, "paused", "Running")
    stalled = jobs.wait_condition(cluster, namespace, "paused", "Restarting", timeout=90)
    caught = datetime.fromisoformat(jobs.condition(stalled, "Restarting")["lastTransitionTime"])
    assert (caught - running_since(resumed)).total_seconds() >= 29, (resumed, stalled)
