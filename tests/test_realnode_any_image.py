"""Issue 69 on the real node: in images that carry nothing of the project (tests/images/), the
operator's delivered helpers do what the trainer image's files did. A hang in an unmodified
script names the rank that never joined the collective, on an older torch and another Python
(trixie: Python 3.13, torch 2.8), in an image with no shell, and where the waiting rank keeps
its CPU busy, as an NCCL rank does (its flight recorder says it waits: Debian's Python, torch
2.15). Delivered as an image volume, the helpers need no copy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from harness import jobs
from harness.cluster import Cluster
from harness.operator import OperatorProcess, helpers_image
from harness.realnode import trainer_job
from harness.reporting import Reporting

# 2400: on a cold machine a test may wait about 20 minutes for its image (hack/test.sh).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]

# The script from $SCRIPT, as /tmp/t.py, by Python alone: no shell in any of these images needed.
RUN = ["python3", "-c", "import os; exec(compile(os.environ['SCRIPT'], '/tmp/t.py', 'exec'))"]


def foreign_job(name: str, ns: str, image: str, script: str, **spec: Any) -> dict[str, Any]:
    """2 workers x 1 process of ``image`` running ``script``, one restart allowed."""
    job = trainer_job(name, ns, image, [], procsPerNode=1, backoffLimit=1, **spec)
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["command"] = RUN
    trainer["env"] = [{"name": "SCRIPT", "value": script}]
    return job


UNMODIFIED_HANG = """
import os, threading, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
hang = os.environ["DDP_ATTEMPT"] == "0" and dist.get_rank() == 1
def spin():  # busy, as NCCL's waiting rank is: a quarter of a core (five times what counts
    while True:  # as quiet; a whole one would only cost the machine more), no memory taken
        burst = time.monotonic() + 0.025
        while time.monotonic() < burst:
            pass
        time.sleep(0.075)
if os.environ["DDP_ATTEMPT"] == "0" and os.environ.get("SPIN") == str(dist.get_rank()):
    threading.Thread(target=spin, daemon=True).start()
x = torch.randn(64, 64)
for step in range(1, 41):
    if hang and step == 20:
        time.sleep(100000)  # stuck inside the loop, without exiting
    x = torch.tanh(x @ x)
    dist.all_reduce(torch.ones(1))
    time.sleep(0.05)
print("TRAINED", torch.__version__, flush=True)
"""


def hang_is_named_and_restarted_in_place(cluster: Cluster, ns: str, name: str) -> dict:
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=300)
    cond = jobs.condition(restarted, "Restarting")
    assert cond["message"].startswith(f"{name}-worker-1 (rank 1) never joined"), cond
    assert "the script reports no progress" in cond["message"], cond
    first = restarted["status"]["firstFailure"]
    assert (first["worker"], first["reason"]) == (1, "Stalled"), first
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=300)
    assert done["status"]["restarts"] == 1, done["status"]
    assert jobs.wait_event(cluster, ns, name, "RestartingInPlace")
    return done


@pytest.mark.parametrize(("image", "torch"), [("trixie-torch28", "2.8.0"), ("no-shell", "2.15.0")])
def test_an_unmodified_hang_names_the_rank_on_an_older_torch_and_with_no_shell(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str], image: str, torch: str
) -> None:
    ns, name = reporting.ns, f"{image}-hang"
    job = foreign_job(name, ns, foreign_images[image], UNMODIFIED_HANG)
    job["spec"]["stallDetection"] = {"timeoutSeconds": 30}
    jobs.apply(cluster, job)
    hang_is_named_and_restarted_in_place(cluster, ns, name)
    log = cluster.core.read_namespaced_pod_log(f"{name}-worker-0", ns, container="trainer")
    assert f"TRAINED {torch}" in log, log


def test_an_nccl_style_wait_that_keeps_its_cpu_busy_still_names_the_rank(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str]
) -> None:
    """Rank 0 waits in its all_reduce with a thread keeping it busy (an NCCL rank spins in
    CUDA's synchronisation: its pod is never quiet); its flight recorder says it stands in one
    unfinished collective, which its delivered watch sends, and the stall names worker 1."""
    ns, name = reporting.ns, "busy-hang"
    job = foreign_job(name, ns, foreign_images["debian-torch"], UNMODIFIED_HANG)
    job["spec"]["stallDetection"] = {"timeoutSeconds": 30}
    job["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "SPIN", "value": "0"})
    jobs.apply(cluster, job)
    hang_is_named_and_restarted_in_place(cluster, ns, name)


WHERE = """
import ddp_operator.progress as p, sys
print("HELPERS", p.__file__, sys.version_info[:2], flush=True)
"""


def test_an_image_volume_delivers_the_helpers_with_no_copy(
    cluster: Cluster, crd: str, foreign_images: dict[str, str]
) -> None:
    """With ``--helpers-delivery ImageVolume`` the kubelet mounts the operator's image (no init
    container): a script in an image with no shell imports the delivered module."""
    ns = f"iv-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace({"metadata": {"name": ns}})
    op = OperatorProcess(cluster, ns, "--helpers-delivery", "ImageVolume").start()
    try:
        op.wait_ready()
        job = foreign_job("iv", ns, foreign_images["no-shell"], WHERE)
        jobs.apply(cluster, job)
        jobs.wait_phase(cluster, ns, "iv", "Succeeded", timeout=180)
        pod = cluster.core.read_namespaced_pod("iv-worker-0", ns)
        assert not pod.spec.init_containers, pod.spec.init_containers
        volume = next(v for v in pod.spec.volumes if v.name == "ddp-helpers")
        assert volume.image.reference == helpers_image(True), volume
        log = cluster.core.read_namespaced_pod_log("iv-worker-0", ns, container="trainer")
        assert "HELPERS /ddp-operator/helpers/ddp_operator/progress.py (3, 11)" in log, log
    finally:
        op.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")
