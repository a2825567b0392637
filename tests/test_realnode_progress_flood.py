"""A stranger cannot starve a job's progress: a pod of another namespace on the real node floods
the progress endpoint, from several threads, with made-up tokens shaped as the kubelet's (some
naming the job's own pods), while a new job starts. The job's reports are all taken (none held
back), nothing restarts, and the flood costs the operator no TokenReview (``report_gate``). A
worker of an image with nothing of ours reports through the same gate."""

from __future__ import annotations

import re
import time

import pytest
from test_metrics import scrape

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.realnode import pod_on_real_node, trainer_job
from harness.reporting import Reporting, progress, progress_job, worker_log

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(900)]

REVIEWS = 'ddp_operator_api_requests_total{code="200",verb="create_tokenreview"}'
STRANGERS = 'ddp_operator_progress_reports_total{result="stranger"}'
FLOOD_THREADS = 4
# A flood of made-up tokens from FLOOD_THREADS threads on kept-alive connections, each bounded in
# count and time (it stops by itself); "FLOODING" once 100 were answered.
FLOOD = """
import base64, collections, http.client, json, sys, threading, time, urllib.parse, uuid
url, job, seconds, threads = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
where = urllib.parse.urlsplit(url)
part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
codes, lock, end = collections.Counter(), threading.Lock(), time.monotonic() + seconds
def flood(t):
    conn = None
    for i in range(100000):
        if time.monotonic() > end:
            return
        named = f"{job}-worker-{i % 2}" if i % 3 == 0 else f"p{t}-{i}"
        pod = {"name": named, "uid": str(uuid.uuid4())}
        claims = {"sub": "system:serviceaccount:x:default"}
        claims["kubernetes.io"] = {"namespace": "x", "pod": pod}
        token = f"{part({'alg': 'RS256'})}.{part(claims)}.{part({'s': i})}"
        try:
            conn = conn or http.client.HTTPConnection(where.hostname, where.port, timeout=5)
            conn.request("POST", where.path, b'{"step": 1}', {"Authorization": "Bearer " + token})
            answer = conn.getresponse()
            answer.read()
            code = answer.status
        except OSError:
            conn, code = None, 0
        with lock:
            codes[code] += 1
            if sum(codes.values()) == 100:
                print("FLOODING", dict(codes), flush=True)
workers = [threading.Thread(target=flood, args=(t,)) for t in range(threads)]
[w.start() for w in workers]
[w.join() for w in workers]
print("FLOOD", json.dumps(codes), flush=True)
"""


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def test_a_stranger_s_flood_of_made_up_tokens_holds_no_report_of_a_new_job_back(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    ns, name, steps = reporting.ns, "flooded", 20
    foreign = f"{ns}-stranger"
    cluster.core.create_namespace({"metadata": {"name": foreign}})
    try:
        args = ["python", "-c", FLOOD, reporting.url(name), name, "900", str(FLOOD_THREADS)]
        cluster.core.create_namespaced_pod(
            foreign, pod_on_real_node("flood", images["trainer"], args)
        )

        def flood_log() -> str:
            try:
                return (
                    cluster.core.read_namespaced_pod_log("flood", foreign, container="main") or ""
                )
            except Exception:  # (not started yet)
                return ""

        wait_for(lambda: "FLOODING" in flood_log(), timeout=120, what="the flood under way")
        assert reporting.op.proc is not None
        pid = reporting.op.proc.pid
        before = scrape(reporting.metrics)
        cpu_before = cpu_seconds(pid)
        # A new job while the flood goes on: its pods' new tokens, its first reports.
        job = progress_job(name, ns, images["trainer"], steps, 0.5)
        job["spec"]["stallDetection"] = {"timeoutSeconds": 30}
        started = time.monotonic()
        jobs.apply(cluster, job)
        wait_for(
            lambda: progress(cluster, ns, name).get("step", 0) >= 1,
            timeout=180,
            what="the job's first report on its status",
        )
        final = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=300)
        took = time.monotonic() - started
        after = scrape(reporting.metrics)
        cpu = cpu_seconds(pid) - cpu_before
        assert "FLOOD " not in flood_log(), "the flood ended before the job: it proves nothing"
    finally:
        cluster.core.delete_namespace(foreign, propagation_policy="Background")
    status = final["status"]
    assert status.get("restarts", 0) == 0, status
    assert not [c for c in status.get("conditions", []) if c.get("reason") == "Stalled"], status
    assert status["progress"]["step"] == steps, status["progress"]
    for i in range(2):  # no report of the job was refused, not once (the reporter says so)
        log = worker_log(cluster, ns, f"{name}-worker-{i}")
        assert not re.search(r"the operator refused a report: \d{3}", log), log[-2000:]
    strangers = after.get(STRANGERS, 0) - before.get(STRANGERS, 0)
    reviews = after.get(REVIEWS, 0) - before.get(REVIEWS, 0)
    # Worker 0's token (rank 0 reports), and the other's if it sent a stack, each reviewed once a
    # minute at most while the job ran; none of the flood's (thousands, refused before review).
    minutes = 1 + int(took // 60)
    assert strangers > 1000, strangers
    assert 1 <= reviews <= 2 * (minutes + 1), reviews
    print(
        f"flood: {strangers:.0f} stranger requests refused during the job, {reviews:.0f} "
        f"TokenReviews (the job's), operator CPU {cpu:.1f} s "
        f"({1000 * cpu / strangers:.2f} s per 1000 refused)"
    )


# Kubeflow Trainer's status updates as transformers' KubeflowCallback posts them (the env the
# operator gives the pod: the URL and the token's file), from a script in Debian's Python alone.
KUBEFLOW_POSTS = """
import json, os, time, urllib.request
url, token = os.environ["KUBEFLOW_TRAINER_SERVER_URL"], os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]
for step in (0, 5, 10):
    status = {"progressPercentage": step * 10, "metrics": [
        {"name": "current_step", "value": str(step)}, {"name": "total_steps", "value": "10"}]}
    if step == 0:  # the start's: the total only
        status = {"progressPercentage": 0, "metrics": [{"name": "total_steps", "value": "10"}]}
    body = json.dumps({"trainerStatus": status}).encode()
    auth = {"Authorization": "Bearer " + open(token).read().strip(),
            "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, body, auth), timeout=10) as r:
        print("ANSWER", r.status, flush=True)
    time.sleep(1)
"""


def test_an_image_with_nothing_of_ours_reports_through_the_same_gate(
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """A worker in Debian's Python image (no torch, nothing of the project's) posts Kubeflow's
    status updates from its own address: each is taken after one review of its token, and the
    job shows its steps."""
    ns, name = reporting.ns, "plain"
    job = trainer_job(name, ns, images["python"], [])
    job["spec"]["nodes"] = 1
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["command"], trainer["args"] = ["python3", "-c", KUBEFLOW_POSTS], []
    before = scrape(reporting.metrics)
    jobs.apply(cluster, job)
    done = jobs.wait_phase(cluster, ns, name, "Succeeded", timeout=180)
    log = worker_log(cluster, ns, f"{name}-worker-0")
    assert log.count("ANSWER 200") == 3, log
    shown = wait_for(
        lambda: progress(cluster, ns, name).get("step") == 10 and progress(cluster, ns, name),
        timeout=30,
        what="the last update on the job",
    )
    assert shown["total"] == 10 and shown.get("protocol") == "kubeflow", shown
    reviews = scrape(reporting.metrics).get(REVIEWS, 0) - before.get(REVIEWS, 0)
    assert reviews == 1, reviews
    assert done["status"].get("restarts", 0) == 0
