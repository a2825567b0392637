"""Issue 69 on the real node: a script in an image that carries nothing of the project (no
shell at all; or Python 3.13 with torch 2.8) calls ``report`` and ``checkpoint`` with no
install, and a worker's failure restarts the group in place (the in-place watch runs from the
operator's image), which resumes from the checkpoint the job says."""

from __future__ import annotations

import pytest
from test_realnode_any_image import foreign_job

from ddp_operator.model import constants as c

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.reporting import Reporting, progress

# 2400: on a cold machine a test may wait about 20 minutes for its image (hack/test.sh).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]

REPORTS_AND_FAILS_ONCE = """
import os, sys, time
import torch
import torch.distributed as dist
from ddp_operator.progress import checkpoint, last_checkpoint, report

dist.init_process_group("gloo")
last = last_checkpoint()
start = last.step if last else 0
print("FROM", start, flush=True)
for step in range(start + 1, 13):
    dist.all_reduce(torch.ones(1))
    report(step, 12)
    if step == 5:
        checkpoint(step, "/ckpt/step-5")
    if step == 8 and os.environ["DDP_ATTEMPT"] == "0" and dist.get_rank() == 1:
        sys.exit(3)  # a worker's failure
    time.sleep(0.3)
print("TRAINED", flush=True)
"""


@pytest.mark.parametrize("image", ["no-shell", "trixie-torch28"])
def test_report_and_checkpoint_with_no_install_and_an_in_place_restart_resumes(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str], image: str
) -> None:
    ns, name = reporting.ns, f"{image}-ckpt"
    job = foreign_job(name, ns, foreign_images[image], REPORTS_AND_FAILS_ONCE)
    job["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "DDP_PROGRESS_INTERVAL", "value": "1"}
    )
    jobs.apply(cluster, job)
    wait_for(lambda: progress(cluster, ns, name).get("step", 0) >= 3, timeout=240, what="reports")
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=300)
    status = done["status"]
    assert status["restarts"] == 1 and status["firstFailure"]["worker"] == 1, status
    assert status["checkpoint"]["step"] == 5, status
    assert status["progress"]["step"] == 12, status
    assert jobs.wait_event(cluster, ns, name, "RestartingInPlace")
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"{c.LABEL_JOB}={name}").items
    assert len(pods) == 2, pods  # the same pods, restarted where they stand
    assert all(
        s.restart_count == 1
        for p in pods
        for s in p.status.container_statuses
        if s.name == "trainer"
    )
    log = cluster.core.read_namespaced_pod_log(f"{name}-worker-0", ns, container="trainer")
    assert "FROM 5" in log and "TRAINED" in log, log
