"""Hangs on the real node, from real torch processes (gloo): a script whose step stops advancing
is restarted by stall detection, even across an operator kill; the rank that never joined the
collective is named, also where torchrun's elastic rendezvous numbered the ranks otherwise than
the pods; a script that never reports is caught from its processes' CPU time."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from ddp_operator.model import constants as c

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.realnode import trainer_job
from harness.reporting import Reporting, progress

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1200)]


def hanging_job(name: str, ns: str, image: str, script: str) -> dict[str, Any]:
    """2 workers x 1 process running ``script`` (reports, if it makes any, every second), stall
    timeout 30 s, one restart allowed."""
    args = ["sh", "-c", 'printf "%s" "$SCRIPT" > /tmp/t.py && exec python3 /tmp/t.py']
    job = trainer_job(name, ns, image, args, procsPerNode=1, backoffLimit=1)
    job["spec"]["stallDetection"] = {"timeoutSeconds": 30}
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [
        {"name": "DDP_PROGRESS_INTERVAL", "value": "1"},
        {"name": "SCRIPT", "value": script},
    ]
    return job


HANGS_ON_ATTEMPT_0 = """
import os, time
import torch
import torch.distributed as dist
from ddp_operator.progress import report

dist.init_process_group("gloo")
hang = os.environ["DDP_ATTEMPT"] == "0" and dist.get_rank() == 1
for step in range(1, 31):
    if hang and step == 6:
        time.sleep(100000)  # stuck inside the loop, without exiting
    dist.all_reduce(torch.ones(1))
    report(step, 30)
    time.sleep(0.2)
print("TRAINED", flush=True)
"""


def test_a_hang_is_caught_by_stall_detection_even_across_an_operator_kill(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Rank 1 stops inside its loop on attempt 0 (sleeps, never exits); rank 0 then waits in
    its all_reduce and reports no more. The operator is SIGKILLed once the job has reported and
    started again: it finds the stall clock in the status, says Stalled within the timeout plus
    a pass, restarts the group, and attempt 1 trains to Succeeded."""
    ns, name = reporting.ns, "hang"
    jobs.apply(cluster, hanging_job(name, ns, images["trainer"], HANGS_ON_ATTEMPT_0))
    wait_for(lambda: progress(cluster, ns, name).get("step", 0) >= 3, timeout=180, what="reports")
    reporting.op.kill()
    reporting.op = reporting.start()
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=120)
    cond = jobs.condition(restarted, "Restarting")
    assert re.search(r"has not advanced from [1-5] since", cond["message"]), cond
    assert "(stall timeout 30s)" in cond["message"], cond
    advanced = datetime.fromisoformat(progress(cluster, ns, name)["advanced"])
    caught = datetime.fromisoformat(cond["lastTransitionTime"])
    # The condition's time has whole seconds, the report's milliseconds: a second of slack.
    assert 29 < (caught - advanced).total_seconds() <= 30 + 15, (advanced, caught)
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    status = done["status"]
    assert status["restarts"] == 1 and status["firstFailure"]["reason"] == "Stalled", status


def test_a_stall_names_the_rank_that_never_joined_the_collective(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Issue 54: the same hang (rank 1 asleep in its loop at step 6, rank 0 in its sixth
    all_reduce); each rank, quiet for 15 s, says where it stands (``progress_stacks``: its stack,
    and its collectives from torch's flight recorder), and the stall names worker 1's pod and
    rank, the collective it never joined, the line it stood at, and where rank 0 waits."""
    ns, name = reporting.ns, "culprit"
    jobs.apply(cluster, hanging_job(name, ns, images["trainer"], HANGS_ON_ATTEMPT_0))
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=240)
    cond = jobs.condition(restarted, "Restarting")
    said = (
        f"{name}-worker-1 (rank 1) never joined all_reduce #6 (default_pg): it stood at "
        "tmp/t.py:11 in <module>; rank 0 waits there at tmp/t.py:12; the training's step has "
        "not advanced from [1-5] since"
    )
    assert re.match(re.escape(said).replace(re.escape("[1-5]"), "[1-5]"), cond["message"]), cond
    first = restarted["status"]["firstFailure"]
    assert (first["worker"], first["pod"], first["reason"]) == (1, f"{name}-worker-1", "Stalled")
    assert first["node"], first  # the culprit's node, for the next failure's judgement
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    assert done["status"]["restarts"] == 1


UNMODIFIED_HANGS_ON_ATTEMPT_0 = """
import os, pickle, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
hang = os.environ["DDP_ATTEMPT"] == "0" and dist.get_rank() == 1
x = torch.randn(128, 128)
for step in range(1, 61):
    if hang and step == 30:
        time.sleep(100000)  # stuck inside the loop, without exiting
    for _ in range(10):
        x = torch.tanh(x @ x)
    dist.all_reduce(torch.ones(1))
    time.sleep(0.05)
print("TRAINED", flush=True)
for f in sorted(os.listdir("/ddp-flight-recorder")):  # what the last attempt left (in its pod)
    if f.startswith("comm_lib_trace_rank_"):
        d = pickle.load(open("/ddp-flight-recorder/" + f, "rb"))
        at = d["entries"][-1]["time_created_ns"]  # (its last collective: when it went quiet)
        print("KEPT", f, d["pg_status"]["0"]["last_enqueued_collective"], at)
"""


def test_a_hang_in_a_script_that_never_reports_is_caught_from_its_processes(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str]
) -> None:
    """Issue 54: a script with no progress code (no ``report``); rank 1 stops at step 30 of
    attempt 0 and rank 0 waits in its all_reduce. Each pod's watch finds its processes quiet,
    its readiness says so, and once both have been quiet for the stall timeout the job says
    Stalled, naming worker 1 (each rank said where it stands through the operator's helpers,
    in Debian's Python image with nothing of the project: ``progress_stacks.autostart``),
    restarts the group, and attempt 1 trains to Succeeded."""
    ns, name = reporting.ns, "quiet-hang"
    jobs.apply(
        cluster,
        hanging_job(name, ns, foreign_images["debian-torch"], UNMODIFIED_HANGS_ON_ATTEMPT_0),
    )
    running = jobs.wait_condition(cluster, ns, name, "Running", timeout=180)
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=240)
    cond = jobs.condition(restarted, "Restarting")
    assert "the script reports no progress" in cond["message"], cond
    assert "(stall timeout 30s" in cond["message"], cond
    assert cond["message"].startswith(
        f"{name}-worker-1 (rank 1) never joined all_reduce #30 (default_pg): it stood at "
        "tmp/t.py:11 in <module>; rank 0 waits there at tmp/t.py:14; no process of any worker "
    ), cond
    began = datetime.fromisoformat(jobs.condition(running, "Running")["lastTransitionTime"])
    caught = datetime.fromisoformat(cond["lastTransitionTime"])
    assert (caught - began).total_seconds() > 30, (began, caught, cond)
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    # Each quiet rank of attempt 0 wrote its flight recorder's dump to its pod's volume, which
    # the in-place restart kept: attempt 1 finds it there (read in the tenant's own pod: a dump
    # is a pickle). Rank 1 never entered all_reduce #30; rank 0 entered it, and waited.
    kept = {}
    for worker, entered in ((0, 30), (1, 29)):
        log = cluster.core.read_namespaced_pod_log(
            f"{name}-worker-{worker}", ns, container="trainer"
        )
        said = [line.split() for line in log.splitlines() if line.startswith("KEPT ")]
        assert [w[1:3] for w in said] == [[f"comm_lib_trace_rank_{worker}", str(entered)]], log
        kept[worker] = datetime.fromtimestamp(int(said[0][3]) / 1e9, UTC)
    # From the hang (rank 1's last collective, by its dump: how long the 29 steps before it
    # took is the machine's): a window or two for the watch to find the group quiet, a probe
    # period for its readiness to say it, the timeout, a pass.
    bound = 2 * c.QUIET_WINDOW_SECONDS + c.QUIET_PROBE_SECONDS + 30 + 30
    assert 30 < (caught - kept[1]).total_seconds() <= bound, (kept, caught, cond)
    status = done["status"]
    assert status["restarts"] == 1 and status["firstFailure"]["reason"] == "Stalled", status
    assert status["firstFailure"]["worker"] == 1 and status["firstFailure"]["node"], status
    assert not status.get("progress"), status  # it never reported


# The same hang, each rank saying which worker (pod) runs it: torchrun numbered it.
ELASTIC_HANGS_ON_ATTEMPT_0 = HANGS_ON_ATTEMPT_0.replace(
    'dist.init_process_group("gloo")\n',
    'dist.init_process_group("gloo")\n'
    'print("RANK", dist.get_rank(), "WORKER", os.environ["VC_TASK_INDEX"], flush=True)\n',
)


def test_an_elastic_hang_names_the_pod_that_runs_the_rank_torchrun_numbered(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Issue 68: an elastic job (c10d rendezvous) under torchrun, whose node ranks follow the
    sorted node descriptors, not the pods' indices (from 11 workers on, or after a round without
    a worker). Here worker 1 gives its IP as its address (``--local-addr``), which sorts before
    worker 0's host name: worker 1 runs rank 0, worker 0 rank 1. Rank 1 hangs at step 6 of
    attempt 0; the stall names worker 0 (the pod that sent rank 1's stack), whose stacks were
    refused before (rank 1 is not worker 0's by index), and attempt 1 trains to Succeeded."""
    ns, name = reporting.ns, "elastic-hang"
    script = (
        '[ "$VC_TASK_INDEX" = 1 ] && export PET_LOCAL_ADDR="$POD_IP"; '
        'printf "%s" "$SCRIPT" > /tmp/t.py && exec torchrun /tmp/t.py'
    )
    job = hanging_job(name, ns, images["trainer"], ELASTIC_HANGS_ON_ATTEMPT_0)
    job["spec"] |= {"minNodes": 2, "maxNodes": 2}
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["args"] = ["sh", "-c", script]
    trainer["env"].append(
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    )
    jobs.apply(cluster, job)
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=240)
    cond = jobs.condition(restarted, "Restarting")
    first = restarted["status"]["firstFailure"]
    named = (first.get("worker"), first.get("pod"), first["reason"])
    assert named == (0, f"{name}-worker-0", "Stalled"), first
    assert cond["message"].startswith(
        f"{name}-worker-0 (rank 1) never joined all_reduce #6 (default_pg): it stood at tmp/t.py:"
    ), cond
    assert "; rank 0 waits there at tmp/t.py:" in cond["message"], cond
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    assert done["status"]["restarts"] == 1
    for worker, rank in ((0, 1), (1, 0)):  # attempt 1 was numbered as attempt 0
        log = cluster.core.read_namespaced_pod_log(
            f"{name}-worker-{worker}", ns, container="trainer"
        )
        assert f"RANK {rank} WORKER {worker}" in log.splitlines(), log
