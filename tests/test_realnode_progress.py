"""The training's progress on its job, from real torch processes on the real node: the example
script (examples/scripts/progress_train.py) reports with ``ddp_operator.progress.report``, the
operator checks each report's pod-bound token with the API server's TokenReview and puts the
latest on ``status.progress``, the printer columns, ``kubectl ddp status`` and its metrics. A pod
of another job or namespace is refused; the operator killed mid-run costs the training nothing."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from test_metrics import scrape

from ddp_operator.model import constants as c
from ddp_operator.sdk import Client, SDKError, job_manifest

from harness import jobs, pylibs
from harness.cluster import Cluster, tool, wait_for
from harness.operator import OperatorProcess, free_port
from harness.realnode import (
    for_real_node,
    kubectl_ddp,
    pod_on_real_node,
    trainer_job,
    wait_pod_done,
)

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1200)]

GATEWAY = "198.18.0.1"  # the pod network's bridge on this host: pods reach the operator there
SCRIPT = "examples/scripts/progress_train.py"
TRAINED = re.compile(r"TRAINED steps=(\d+) .* max_step_gap=([\d.]+)")


class Reporting:
    """An operator with the progress endpoint (and metrics), watching a namespace of its own."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.cluster, self.ns = cluster, ns
        self.port, self.metrics = free_port(), free_port()
        self.args = ("--progress-address", f"{GATEWAY}:{self.port}")
        self.args += ("--metrics-port", str(self.metrics))
        self.op = self.start()

    def start(self) -> OperatorProcess:
        op = OperatorProcess(self.cluster, self.ns, *self.args).start()
        op.wait_ready()
        return op

    def url(self, job: str) -> str:
        return f"http://{GATEWAY}:{self.port}/v1/namespaces/{self.ns}/ddpjobs/{job}/progress"


@pytest.fixture(scope="module")
def reporting(cluster: Cluster, crd: str, images: dict[str, str]) -> Iterator[Reporting]:
    ns = f"rp-{uuid.uuid4().hex[:6]}"  # not one the session's operator watches
    cluster.core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, timeout=30, what="sa")
    r = Reporting(cluster, ns)
    try:
        yield r
    finally:
        r.op.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")


def progress_job(
    name: str, ns: str, image: str, steps: int, step_time: float, procs: int = 2
) -> dict:
    """2 workers x ``procs`` processes of the example (torchrun's; one: the script alone, its
    rank from the operator), reporting every second."""
    launch = ["torchrun"] if procs > 1 else ["python"]
    args = [*launch, SCRIPT, "--steps", str(steps), "--step-time", str(step_time)]
    job = trainer_job(name, ns, image, args, procsPerNode=procs)
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [{"name": "DDP_PROGRESS_INTERVAL", "value": "1"}]
    return job


def progress(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return ((jobs.get(cluster, ns, name) or {}).get("status") or {}).get("progress") or {}


def worker_log(cluster: Cluster, ns: str, pod: str) -> str:
    return cluster.core.read_namespaced_pod_log(pod, ns, container="trainer")


@pytest.fixture(scope="module")
def reported(cluster: Cluster, reporting: Reporting, images: dict[str, str]) -> dict[str, Any]:
    """The example run to Succeeded, with the percents its status showed on the way."""
    ns, name, steps = reporting.ns, "reported", 150
    jobs.apply(cluster, progress_job(name, ns, images["trainer"], steps, 0.1))
    seen: list[float] = []

    def done() -> bool:
        p = progress(cluster, ns, name).get("percent")
        if p is not None and (not seen or seen[-1] != p):
            seen.append(p)
        return (jobs.get(cluster, ns, name) or {}).get("status", {}).get("phase") in (
            "Succeeded",
            "Failed",
        )

    wait_for(done, timeout=300, interval=0.5, what="the job to finish")
    return {"ns": ns, "name": name, "steps": steps, "seen": seen}


def test_progress_rises_to_100_on_the_job_its_columns_and_metrics(
    cluster: Cluster, reporting: Reporting, reported: dict[str, Any]
) -> None:
    ns, name, steps = reported["ns"], reported["name"], reported["steps"]
    job = wait_for(
        lambda: (
            (j := jobs.get(cluster, ns, name) or {})["status"].get("progress", {}).get("step")
            == steps
            and j
        ),
        timeout=15,
        what="the last step on the job",
    )
    assert job["status"]["phase"] == "Succeeded", job["status"]
    p = job["status"]["progress"]
    assert p["step"] == steps and p["total"] == steps and p["percent"] == 100.0, p
    assert p["etaSeconds"] == 0 and p["attempt"] == 0, p
    assert set(p["metrics"]) == {"loss", "samples_per_s"} and p["metrics"]["loss"] < 1.0, p
    seen = reported["seen"]
    assert len(seen) >= 3 and seen == sorted(seen) and 0 < seen[0] < 100, seen
    # The printer columns.
    kubectl = [tool("kubectl"), "--kubeconfig", str(cluster.kubeconfig), "-n", ns]
    out = subprocess.run([*kubectl, "get", "ddpj", name], capture_output=True, text=True).stdout
    head, row = out.splitlines()[:2]
    assert head.split()[-2:] == ["PROGRESS", "ETA"], out
    assert row.split()[-2] in ("100", "100.0") and row.split()[-1] == "0s", out
    status = kubectl_ddp(cluster, "status", name, "-n", ns)
    assert f"progress: 100.0% (step {steps}/{steps})  loss=" in status, status
    top = kubectl_ddp(cluster, "top", "--once", "-n", ns)
    line = next(x for x in top.splitlines() if x.startswith(f"{name} "))
    assert "Succeeded" in line and f"[{'#' * 20}] 100.0%  {steps}/{steps}" in line, top
    # The metrics, by job.
    m = scrape(reporting.metrics)
    labels = f'job="{name}",namespace="{ns}"'
    assert m[f"ddp_job_progress_ratio{{{labels}}}"] == 1.0
    assert m[f"ddp_job_step{{{labels}}}"] == steps
    loss = f'ddp_job_metric{{job="{name}",name="loss",namespace="{ns}"}}'  # labels sorted
    assert m[loss] == p["metrics"]["loss"]
    assert m['ddp_operator_progress_reports_total{result="accepted"}'] >= len(seen)
    # Rank 0 only: the other rank's processes reported nothing (one process a second at most).
    log = worker_log(cluster, ns, f"{name}-worker-0")
    assert int(TRAINED.search(log).group(1)) == steps, log
    assert "ddp progress:" not in log + worker_log(cluster, ns, f"{name}-worker-1"), log


POST = """
import json, sys, urllib.request, urllib.error
token = open("/var/run/secrets/ddp-operator.io/progress/token").read().strip()
req = urllib.request.Request(sys.argv[1], json.dumps({"step": 1, "total": 2}).encode(),
    {"Authorization": "Bearer " + token, "Content-Type": "application/json"}, method="POST")
try:
    r = urllib.request.urlopen(req, timeout=10); print("ANSWER", r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print("ANSWER", e.code, e.read().decode())
"""


def answer(cluster: Cluster, ns: str, pod: str) -> tuple[int, str]:
    names = lambda: {p.metadata.name for p in cluster.core.list_namespaced_pod(ns).items}  # noqa: E731
    wait_for(lambda: pod in names(), timeout=60, what=f"pod {pod}")
    wait_pod_done(cluster, ns, pod)
    container = "trainer" if pod.startswith("other") else "main"
    log = cluster.core.read_namespaced_pod_log(pod, ns, container=container)
    found = re.search(r"ANSWER (\d+) (.*)", log)
    assert found, log
    return int(found.group(1)), found.group(2)


def test_a_pod_of_another_job_or_namespace_is_refused(
    cluster: Cluster, reporting: Reporting, reported: dict[str, Any], images: dict[str, str]
) -> None:
    ns, name = reported["ns"], reported["name"]
    before = progress(cluster, ns, name)
    # A worker of another job, with its own (valid) token, reports for this one.
    other = trainer_job("other", ns, images["trainer"], ["python", "-c", POST, reporting.url(name)])
    other["spec"]["nodes"] = 1
    jobs.apply(cluster, other)
    code, why = answer(cluster, ns, "other-worker-0")
    assert code == 403 and f"pod other-worker-0 is no worker of ddpjob {ns}/{name}" in why, why
    # A pod of another namespace with a token of the same audience.
    foreign = f"{ns}-x"
    cluster.core.create_namespace({"metadata": {"name": foreign}})
    try:
        wait_for(lambda: cluster.core.list_namespaced_service_account(foreign).items, what="sa")
        token = {"audience": "ddp-operator.io/progress", "expirationSeconds": 600, "path": "token"}
        pod = pod_on_real_node(
            "foreign",
            images["trainer"],
            ["python", "-c", POST, reporting.url(name)],
            volumes=[{"name": "t", "projected": {"sources": [{"serviceAccountToken": token}]}}],
        )
        pod["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "t", "mountPath": "/var/run/secrets/ddp-operator.io/progress"}
        ]
        cluster.core.create_namespaced_pod(foreign, pod)
        code, why = answer(cluster, foreign, "foreign")
        assert code == 403 and f"a pod of namespace {foreign} cannot report" in why, why
    finally:
        cluster.core.delete_namespace(foreign, propagation_policy="Background")
    # No token at all, or one the API server did not issue.
    for auth in ({}, {"Authorization": "Bearer not-a-token"}):
        req = urllib.request.Request(reporting.url(name), b'{"step": 1}', auth, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401, (auth, refused.value.read())
    assert progress(cluster, ns, name) == before


def test_the_operator_killed_mid_run_costs_the_training_nothing(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Killed while the job trains: the script goes on at its pace (its longest step gap stays
    near its step time), says once that it cannot report, and the restarted operator takes the
    reports again up to 100%."""
    ns, name, steps = reporting.ns, "unstalled", 200
    jobs.apply(cluster, progress_job(name, ns, images["trainer"], steps, 0.1, procs=1))
    first = wait_for(
        lambda: (p := progress(cluster, ns, name)).get("step") and p, 240, what="a report"
    )
    reporting.op.kill()
    try:
        wait_for(
            lambda: "cannot reach the operator" in worker_log(cluster, ns, f"{name}-worker-0"),
            timeout=30,
            what="the script to notice",
        )
    finally:
        reporting.op = reporting.start()
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    p = done["status"]["progress"]
    assert p["step"] == steps > first["step"] and p["percent"] == 100.0, (first, p)
    log = worker_log(cluster, ns, f"{name}-worker-0")
    trained = TRAINED.search(log)
    assert trained and float(trained.group(2)) < 1.0, log  # 0.1 s steps: never held up
    assert log.count("ddp progress: cannot reach the operator") == 1, log


def test_the_sdk_submits_waits_suspends_resumes_reads_logs_and_progress_and_deletes(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    client = Client(namespace=reporting.ns, kubeconfig=str(cluster.kubeconfig))
    job = job_manifest(
        "examples/scripts/progress_train.py",
        image=images["trainer"],
        nodes=2,
        procs_per_node=1,
        name="sdk",
        args=["--steps", "40", "--step-time", "0.05"],
    )
    name = client.submit(for_real_node(job, images["trainer"]))
    client.wait(name, "Running", timeout=120)
    client.suspend(name)
    client.wait(name, "Suspended", timeout=60)
    client.resume(name)
    client.wait(name, "Running", timeout=120)
    live = list(client.stream(name, worker=0))  # followed as it grows, until the trainer ends
    assert any(x.startswith("TRAINED steps=40") for x in live), live
    done = client.wait(name, timeout=240)
    assert done["status"]["restarts"] == 0  # a resume is no restart
    assert client.progress(name)["step"] == 40  # written at once: the last step
    assert "TRAINED steps=40" in client.logs(name, worker=0)
    streamed = list(client.stream(name))  # the trainers have ended: the whole logs, then done
    assert any(x.startswith("worker-0 | TRAINED steps=40") for x in streamed), streamed
    assert any(x.startswith("worker-1 | ") for x in streamed), streamed
    assert "worker-1 | " in client.logs(name) and name in {
        j["metadata"]["name"] for j in client.list()
    }
    with pytest.raises(SDKError, match="409"):
        client.submit(for_real_node(job, images["trainer"]))
    client.delete(name)
    with pytest.raises(SDKError, match="404"):
        wait_for(lambda: client.get(name) and None, timeout=30, what="the job gone")


def checkpointing(job: dict[str, Any], every: int, *more: str) -> dict[str, Any]:
    """``job`` saving a checkpoint every ``every`` steps into an emptyDir (a pod restarted in
    place keeps it) and saying so; ``more``: the script's further arguments."""
    spec = job["spec"]["template"]["spec"]
    trainer = spec["containers"][0]
    trainer["args"] += ["--checkpoint-every", str(every), "--checkpoint-dir", "/ckpt", *more]
    trainer["volumeMounts"] = [{"name": "ckpt", "mountPath": "/ckpt"}]
    spec["volumes"] = [{"name": "ckpt", "emptyDir": {}}]
    return job


def test_a_group_restart_resumes_from_the_job_s_checkpoint_and_reports_anew(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Rank 0 saves every 10 steps and fails at step 35 of attempt 0: the job shows checkpoint
    30, the failure's cost (from the last step it reported to 30), and the restarted group is
    told to resume at 30 (``DDP_RESUME_*``): the script loads it, and its next attempt reports
    from step 31 (its own rate, its own ETA) to the end."""
    ns, name = reporting.ns, "restarted"
    job = progress_job(name, ns, images["trainer"], 60, 0.1, procs=1)
    job["spec"]["backoffLimit"] = 1
    checkpointing(job, 10, "--fail-at-step", "35")
    jobs.apply(cluster, job)
    seen: list[tuple[int, int]] = []

    def finished() -> bool:
        j = jobs.get(cluster, ns, name) or {}
        p = (j.get("status") or {}).get("progress") or {}
        if p and (not seen or seen[-1] != (p.get("attempt"), p["step"])):
            seen.append((p.get("attempt"), p["step"]))
        return (j.get("status") or {}).get("phase") == "Succeeded" and p.get("step") == 60

    wait_for(finished, timeout=300, interval=0.3, what="the job to succeed at step 60")
    attempts = [a for a, _ in seen]
    assert attempts == sorted(attempts) and attempts[0] == 0 and attempts[-1] == 1, seen
    assert max(s for a, s in seen if a == 0) <= 35, seen  # attempt 0 got no further
    assert min(s for a, s in seen if a == 1) > 30, seen  # attempt 1 went on from 30
    assert seen[-1] == (1, 60), seen
    status = (jobs.get(cluster, ns, name) or {})["status"]
    assert status["restarts"] == 1
    mark = status["checkpoint"]
    assert (mark["step"], mark["path"], mark["attempt"]) == (60, "/ckpt/step-60.pt", 1), mark
    first = status["firstFailure"]
    assert first["resumeStep"] == 30 and 30 <= first["lastStep"] <= 35, first
    assert first["stepsLost"] == first["lastStep"] - 30, first
    ledger = status["goodput"]
    assert ledger["failures"] == 1 and ledger["stepsLost"] == first["stepsLost"], ledger
    assert ledger["restartsWithoutProgress"] == 0, ledger
    # The time it cost, measured: to its detection, to the group running, to its first report.
    seconds = [first[k] for k in ("detectedSeconds", "runningAgainSeconds", "firstStepSeconds")]
    assert 0 <= seconds[0] <= seconds[1] <= seconds[2] < 60, first
    assert ledger["lostSeconds"] >= seconds[2], ledger
    assert 0 < ledger["ratio"] < 1, ledger
    m = scrape(reporting.metrics)
    assert m['ddp_operator_failure_lost_seconds_total{reason="Error"}'] >= seconds[2], m
    assert m['ddp_operator_failure_lost_steps_total{reason="Error"}'] >= first["stepsLost"], m
    assert m[f'ddp_job_goodput_ratio{{job="{name}",namespace="{ns}"}}'] == ledger["ratio"], m
    log = worker_log(cluster, ns, f"{name}-worker-0")
    assert "RESUMED from step 30 (/ckpt/step-30.pt)" in log, log
    shown = kubectl_ddp(cluster, "status", name, "-n", ns)
    assert "checkpoint: step 60 at /ckpt/step-60.pt" in shown, shown
    assert f"goodput: 1 failures cost {ledger['stepsLost']} steps and" in shown, shown
    assert f"effective training time {100 * ledger['ratio']:.1f}%" in shown, shown


def test_a_job_failing_at_the_same_step_after_every_restart_stops_with_no_progress(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Rank 0 saves at step 3 and fails at step 5 in every attempt (a bad shard at step 5):
    attempt 0 advanced; attempts 1 and 2 resume at 3 and end at 5 again. With
    maxRestartsWithoutProgress 1 the job fails, reason NoProgress, naming where they ended,
    long before its backoffLimit of 10."""
    ns, name = reporting.ns, "stuck-at-5"
    job = progress_job(name, ns, images["trainer"], 20, 0.2, procs=1)
    job["spec"].update(nodes=1, backoffLimit=10, failurePolicy={"maxRestartsWithoutProgress": 1})
    checkpointing(job, 3, "--fail-at-step", "5", "--fail-attempts", "99")
    jobs.apply(cluster, job)
    failed = jobs.wait_phase(cluster, ns, name, "Failed", timeout=300)
    status = failed["status"]
    cond = jobs.condition(failed, "Failed")
    assert cond["reason"] == "NoProgress", cond
    assert cond["message"].endswith(
        "2 restarts in a row made no progress past step 5 or checkpoint 3; they ended at "
        "steps 5, 5 (maxRestartsWithoutProgress 1)"
    ), cond
    assert status["restarts"] == 2 and status["countedRestarts"] == 2, status
    assert status["goodput"]["diedAt"] == [5, 5], status["goodput"]
    assert status["checkpoint"]["step"] == 3 and status["checkpoint"]["attempt"] == 0, status
    assert "RESUMED from step 3" in worker_log(cluster, ns, f"{name}-worker-0")


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
    """Issue 54: the same hang (rank 1 asleep in its loop at step 6, rank 0 in its
    all_reduce); each rank, quiet for 15 s, says where it stands (``progress_stacks``), and the
    stall names worker 1's pod and rank, the line it stood at, and where rank 0 waits."""
    ns, name = reporting.ns, "culprit"
    jobs.apply(cluster, hanging_job(name, ns, images["trainer"], HANGS_ON_ATTEMPT_0))
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=240)
    cond = jobs.condition(restarted, "Restarting")
    said = (
        f"{name}-worker-1 (rank 1) never joined the collective: it stood at tmp/t.py:11 in "
        "<module>; rank 0 waits in all_reduce at tmp/t.py:12; the training's step has not "
        "advanced from [1-5] since"
    )
    assert re.match(re.escape(said).replace(re.escape("[1-5]"), "[1-5]"), cond["message"]), cond
    first = restarted["status"]["firstFailure"]
    assert (first["worker"], first["pod"], first["reason"]) == (1, f"{name}-worker-1", "Stalled")
    assert first["node"], first  # the culprit's node, for the next failure's judgement
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    assert done["status"]["restarts"] == 1


UNMODIFIED_HANGS_ON_ATTEMPT_0 = """
import os, time
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
"""


def test_a_hang_in_a_script_that_never_reports_is_caught_from_its_processes(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """Issue 54: a script with no progress code (no ``report``); rank 1 stops at step 30 of
    attempt 0 and rank 0 waits in its all_reduce. Each pod's watch finds its processes quiet,
    its readiness says so, and once both have been quiet for the stall timeout the job says
    Stalled, restarts the group, and attempt 1 trains to Succeeded."""
    ns, name = reporting.ns, "quiet-hang"
    jobs.apply(cluster, hanging_job(name, ns, images["trainer"], UNMODIFIED_HANGS_ON_ATTEMPT_0))
    running = jobs.wait_condition(cluster, ns, name, "Running", timeout=180)
    restarted = jobs.wait_condition(cluster, ns, name, "Restarting", timeout=240)
    cond = jobs.condition(restarted, "Restarting")
    assert "the script reports no progress" in cond["message"], cond
    assert "(stall timeout 30s" in cond["message"], cond
    began = datetime.fromisoformat(jobs.condition(running, "Running")["lastTransitionTime"])
    caught = datetime.fromisoformat(cond["lastTransitionTime"])
    # Started, trained 30 steps (a few seconds), then: a window or two for the watch to find
    # the group quiet, a probe period for its readiness to say it, the timeout, a pass.
    bound = 30 + 2 * c.QUIET_WINDOW_SECONDS + c.QUIET_PROBE_SECONDS + 30
    assert 30 < (caught - began).total_seconds() <= bound, (began, caught, cond)
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=240)
    status = done["status"]
    assert status["restarts"] == 1 and status["firstFailure"]["reason"] == "Stalled", status
    assert not status.get("progress"), status  # it never reported


def run_framework_script(
    cluster: Cluster, ns: str, name: str, image: str, lib: Any, script: str, *env: dict
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A 1-worker job running ``script`` with the libraries of ``lib`` (a host folder, mounted at
    /opt/lib) on its path, to its end: its status, the progress it showed on the way, its log."""
    args = ["sh", "-c", 'printf "%s" "$SCRIPT" > /tmp/t.py && exec python3 /tmp/t.py']
    job = trainer_job(name, ns, image, args, procsPerNode=1)
    job["spec"]["nodes"] = 1
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "lib", "hostPath": {"path": str(lib), "type": "Directory"}}]
    trainer = spec["containers"][0]
    trainer["volumeMounts"] = [{"name": "lib", "mountPath": "/opt/lib", "readOnly": True}]
    trainer["env"] = [
        {"name": "SCRIPT", "value": script},
        {"name": "PYTHONPATH", "value": "/opt/lib:/opt/ddp-operator"},
        *env,
    ]
    jobs.apply(cluster, job)
    seen: list[dict[str, Any]] = []

    def finished() -> bool:
        j = jobs.get(cluster, ns, name) or {}
        p = (j.get("status") or {}).get("progress") or {}
        if p and (not seen or seen[-1].get("updated") != p.get("updated")):
            seen.append(p)
        return (j.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    wait_for(finished, timeout=300, interval=0.3, what=f"job {name} to finish")
    status = (jobs.get(cluster, ns, name) or {})["status"]
    return status, seen, worker_log(cluster, ns, f"{name}-worker-0")


HUGGING_FACE = """
import time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

class Pace(TrainerCallback):  # a real model's step takes time (no progress code here)
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(0.3)

torch.manual_seed(0)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
rows = torch.randint(0, 64, (64, 16))
data = [{"input_ids": row, "labels": row} for row in rows]
args = TrainingArguments(output_dir="/tmp/out", max_steps=40, per_device_train_batch_size=4,
    logging_steps=5, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True)
Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data, callbacks=[Pace()]).train()
print("TRAINED", flush=True)
"""


def test_a_hugging_face_trainer_reports_with_no_code_change(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """A Hugging Face ``Trainer`` script (a tiny GPT-2 built here, no download) that never
    imports ddp_operator, with ``report_to="none"``: transformers' own KubeflowCallback finds
    the Kubeflow Trainer variables the operator gives the pod and posts Kubeflow's status
    updates, which the job shows as progress: its step of 40, ETA and loss on the way, 100% at
    the end."""
    ns, name = reporting.ns, "hugging-face"
    offline = {"name": "HF_HUB_OFFLINE", "value": "1"}
    status, seen, log = run_framework_script(
        cluster, ns, name, images["trainer"], pylibs.transformers(), HUGGING_FACE, offline
    )
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    last = status["progress"]
    assert (last["step"], last["total"], last["percent"], last["attempt"]) == (40, 40, 100.0, 0)
    assert last["etaSeconds"] == 0 and "loss" in last["metrics"], last
    during = [p for p in seen if 0 < p["step"] < 40]
    assert during and "etaSeconds" in during[0], seen
    # The callback sends the loss from the step after its first logging step (5) on: an update
    # at step 5 itself, seen first under load, has none yet.
    assert any("loss" in p["metrics"] for p in during), seen
    assert "ddp progress" not in log, log  # the script has no reporter of ours


LIGHTNING = """
import time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(0.2)  # a real model's step takes time (no progress code here)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
saver = pl.callbacks.ModelCheckpoint(dirpath="/tmp/ckpt", every_n_train_steps=10, save_last=True)
trainer = pl.Trainer(max_steps=40, accelerator="cpu", devices=1, logger=False,
    enable_progress_bar=False, callbacks=[saver])
trainer.fit(Tiny(), DataLoader(data, batch_size=4))
print("TRAINED", flush=True)
"""


def test_a_lightning_script_reports_with_no_code_change(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """A PyTorch Lightning script that never imports ddp_operator: Lightning adds the image's
    callback by itself (the entry point ``lightning.pytorch.callbacks_factory`` the trainer
    image declares), which reports each step (of 40) with its loss, and the checkpoints its
    ModelCheckpoint writes."""
    ns, name = reporting.ns, "lightning"
    interval = {"name": "DDP_PROGRESS_INTERVAL", "value": "1"}
    status, seen, log = run_framework_script(
        cluster, ns, name, images["trainer"], pylibs.lightning(), LIGHTNING, interval
    )
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    last = status["progress"]
    assert (last["step"], last["total"], last["percent"]) == (40, 40, 100.0), last
    assert "loss" in last["metrics"], last
    assert [p for p in seen if 0 < p["step"] < 40], seen
    mark = status.get("checkpoint") or {}
    assert mark.get("path", "").startswith("/tmp/ckpt/") and mark.get("step", 0) >= 10, status
