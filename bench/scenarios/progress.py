"""S8: what training progress costs the operator with N jobs reporting (1000 at full size), each
as ``ddp_operator.progress`` does it (every 10 s, spread over the interval) with a token bound to
its worker pod, as the kubelet projects it (TokenRequest, the progress audience). The baseline,
in the same run: the same jobs and operator, nobody reporting. Then a stranger's flood: made-up
tokens shaped as the kubelet's (naming the jobs' pods) from FLOOD_THREADS threads for one
interval while every job reports once more: what the flood costs the operator per 1000
requests, the reviews it costs (none), and the jobs' reports' latency under it (none refused)."""

from __future__ import annotations

import base64
import json
import statistics
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from ddp_operator.model import constants as c

from contenders.ours import Ours
from cost import Meter
from podwatch import PodWatch

INTERVAL = 10.0  # seconds between two reports of a job: the reporter's default
FLOOD_THREADS = 4


def _token(ours: Ours, ns: str, pod: dict[str, Any]) -> str:
    """A token of the namespace's default ServiceAccount bound to the pod, for the endpoint."""
    body = {
        "spec": {
            "audiences": [c.PROGRESS_AUDIENCE],
            "expirationSeconds": 3600,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", **pod},
        }
    }
    made = ours.cluster.core.create_namespaced_service_account_token("default", ns, body)
    return made.status.token


def _post(url: str, token: str, report: dict[str, Any]) -> tuple[int, float]:
    """One report: its HTTP status and seconds."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, json.dumps(report).encode(), headers, method="POST")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status, time.monotonic() - t0
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"report refused: {exc.code} {exc.read().decode()}") from exc


def _made_up(pod: str) -> str:
    """A token shaped as the kubelet's, naming ``pod`` (with a UID of its own), unsigned."""

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {"kubernetes.io": {"namespace": "x", "pod": {"name": pod, "uid": str(uuid.uuid4())}}}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.{part({'sig': pod})}"


def _stranger(url: str, pod: str) -> int:
    """One made-up report: its HTTP status (403 expected: refused before any review)."""
    headers = {"Authorization": f"Bearer {_made_up(pod)}"}
    request = urllib.request.Request(url, b'{"step": 1}', headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def flood_cost(
    ours: Ours, url: str, tokens: dict[str, str], steps: dict[str, int]
) -> dict[str, Any]:
    """One interval of every job reporting under a stranger's flood: the flood's requests and
    answers, the operator's CPU per 1000 of them (over the jobs' own cost), the reviews asked
    meanwhile, and the jobs' reports' latency (a refused one raises)."""
    stop, answers, lock = threading.Event(), {}, threading.Lock()
    jobs = list(tokens)

    def flood() -> None:
        for i in range(1_000_000):
            if stop.is_set():
                return
            code = _stranger(url.format(jobs[i % len(jobs)]), f"{jobs[i % len(jobs)]}-worker-0")
            with lock:
                answers[code] = answers.get(code, 0) + 1

    before = ours.requests()
    meter = Meter(ours.pids()).start()
    threads = [threading.Thread(target=flood, daemon=True) for _ in range(FLOOD_THREADS)]
    for t in threads:
        t.start()
    t0, futures = time.monotonic(), []
    for k, job in enumerate(jobs):
        time.sleep(max(0.0, t0 + INTERVAL * k / len(jobs) - time.monotonic()))
        steps[job] += 10
        report = {"step": steps[job], "total": steps[job] + 10}
        futures.append(ours.pool.submit(_post, url.format(job), tokens[job], report))
    latencies = sorted(f.result()[1] for f in futures)
    time.sleep(max(0.0, t0 + INTERVAL - time.monotonic()))
    stop.set()
    for t in threads:
        t.join(60)
    busy = meter.stop()
    asked = ours.requests()
    flooded = sum(answers.values())
    return {
        "stranger_requests": flooded,
        "stranger_answers": dict(sorted(answers.items())),
        "reviews": asked.get("create_tokenreview", 0) - before.get("create_tokenreview", 0),
        "cpu_s": busy["controller"],
        "cpu_per_1000_stranger_requests": round(1000 * busy["controller"] / max(1, flooded), 2),
        "job_reports": len(latencies),
        "job_p50_ms": round(1000 * statistics.median(latencies), 1),
        "job_p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1),
    }


def progress_cost(ours: Ours, jobs: int, window: float) -> dict[str, Any]:
    """The operator's CPU over ``window`` seconds with ``jobs`` jobs reporting, against the same
    window without reports; the reports' latency and the API requests each cost."""
    ns = ours.namespace("s8")
    pods = PodWatch(ours.cluster, ns, ours.dead)
    try:
        ours.create(ns, [f"p{k}" for k in range(jobs)], 1)
        pods.wait_running(jobs, f"s8: {jobs} jobs x 1 worker -> Running")
    finally:
        pods.close()
    listed = ours.cluster.core.list_namespaced_pod(ns).items
    workers = {p.metadata.labels[c.LABEL_JOB]: {"name": p.metadata.name, "uid": p.metadata.uid}
               for p in listed}  # fmt: skip
    made = ours.pool.map(lambda j: _token(ours, ns, workers[j]), workers)
    tokens = dict(zip(workers, made, strict=True))
    url = f"http://127.0.0.1:{ours.progress_port}/v1/namespaces/{ns}/ddpjobs/{{}}/progress"

    idle = Meter(ours.pids()).start()
    time.sleep(window)
    idle_cpu = idle.stop()
    before = ours.requests()
    rounds = max(1, int(window / INTERVAL))
    steps = {job: 0 for job in workers}
    latencies: list[float] = []
    meter = Meter(ours.pids()).start()
    t0 = time.monotonic()
    for r in range(rounds):
        futures = []
        for k, job in enumerate(workers):
            # Spread over the interval, as independent jobs are.
            due = t0 + r * INTERVAL + INTERVAL * k / len(workers)
            time.sleep(max(0.0, due - time.monotonic()))
            steps[job] = (r + 1) * 10
            report = {"step": steps[job], "total": rounds * 10, "metrics": {"loss": 1.0 / (r + 1)}}
            futures.append(ours.pool.submit(_post, url.format(job), tokens[job], report))
        latencies += [f.result()[1] for f in futures]
    time.sleep(max(0.0, t0 + rounds * INTERVAL - time.monotonic()))
    busy = meter.stop()
    asked = ours.requests()
    per_verb = {v: asked.get(v, 0) - before.get(v, 0) for v in asked}
    per_verb = {v: n for v, n in per_verb.items() if n}
    reports = len(latencies)
    flooded = flood_cost(ours, url, tokens, steps)

    def written() -> int:
        found = ours.cluster.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL)
        return sum(
            (j.get("status") or {}).get("progress", {}).get("step") == steps[j["metadata"]["name"]]
            for j in found["items"]
        )

    deadline = time.monotonic() + 30
    while (done := written()) < jobs and time.monotonic() < deadline:
        time.sleep(1)
    ours.drop(ns)
    seconds = busy["wall"]
    latencies.sort()
    return {
        "jobs": jobs,
        "reports": reports,
        "seconds": round(seconds, 1),
        "written": done,
        "cpu_s": busy["controller"],
        "idle_cpu_s": idle_cpu["controller"],
        "apiserver_cpu_s": busy.get("apiserver"),
        "idle_apiserver_cpu_s": idle_cpu.get("apiserver"),
        "cpu_per_1000_reports": round(
            1000 * (busy["controller"] - idle_cpu["controller"]) / reports, 2
        ),
        "requests": per_verb,
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * latencies[int(0.99 * (reports - 1))], 1),
        "flood": flooded,
    }
