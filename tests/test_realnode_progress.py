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
from datetime import datetime
from typing import Any

import pytest
from test_metrics import scrape

from ddp_operator.progress import TIMEOUT as REPORT_TIMEOUT
from ddp_operator.sdk import Client, SDKError, job_manifest

from harness import jobs
from harness.cluster import Cluster, tool, wait_for
from harness.realnode import (
    for_real_node,
    kubectl_ddp,
    pod_on_real_node,
    trainer_job,
    wait_pod_done,
)
from harness.reporting import TRAINED, Reporting, progress, progress_job, worker_log

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1200)]


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
        # Refused before any review: its pod is no worker of a job the operator runs.
        assert code == 403 and f"pod {foreign}/foreign is no worker of a job" in why, why
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
    # Never held up: a step that waited for a report would take up to the report's timeout. Not
    # a step's time (0.1 s): under a full CPU the kernel alone held one 1.4 s (run 51).
    assert trained and float(trained.group(2)) < REPORT_TIMEOUT, log
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
    # The time it cost, measured: to its detection, to the group running, to its first report,
    # which came before the job's end (its length is the machine's: no bound of seconds here).
    seconds = [first[k] for k in ("detectedSeconds", "runningAgainSeconds", "firstStepSeconds")]
    assert 0 <= seconds[0] <= seconds[1] <= seconds[2], first
    detected, done = (
        datetime.fromisoformat(t) for t in (first["detectedAt"], status["completionTime"])
    )
    assert seconds[2] - seconds[0] <= (done - detected).total_seconds() + 1, (first, status)
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
