"""How a job loop writes its job's status (``status_writer``), through the API (any cluster):
the record of a failure that replaced another holds none of the other's fields. A merge patch
keeps what it does not name: a stall recorded after a worker's exit carried the exit's code and
source (CI of b3eefed), and a node's streak would never have been cleared."""

from __future__ import annotations

import pytest

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def test_a_failure_record_replaced_by_one_with_fewer_fields_holds_none_of_the_old_ones(
    cluster: Cluster, namespace: str
) -> None:
    """Attempt 0 ends by a worker's exit (code 3, its termination message); attempt 1 by a
    worker deleted (no exit code, no words): its record is the deletion's alone."""
    jobs.apply(cluster, ddpjob("rec", namespace, nodes=2, backoffLimit=3))
    wait_running(cluster, namespace, "rec", 2)
    pods.finish(cluster, namespace, "rec-worker-0", 3, via="status", message="ValueError: bad")
    wait_running(cluster, namespace, "rec", 2, attempt=1)
    first = jobs.get(cluster, namespace, "rec")["status"]["firstFailure"]
    assert (first["attempt"], first["exitCode"], first["source"]) == (0, 3, "TerminationMessage")
    pods.delete(cluster, namespace, "rec-worker-1")

    def second() -> dict | None:
        status = jobs.get(cluster, namespace, "rec")["status"]
        found = status.get("firstFailure") or {}
        return found if found.get("attempt") == 1 else None

    record = wait_for(second, timeout=60, what="attempt 1's failure on the job")
    assert record["reason"] == "Deleted" and record["pod"] == "rec-worker-1", record
    left = {"exitCode", "source", "summary", "rank"} & record.keys()
    assert not left and "ValueError" not in str(record), record
