"""S8: what training progress costs the operator with N jobs reporting (1000 at full size), each
as ``ddp_operator.progress`` does it (every 10 s, spread over the interval) with a token bound to
its worker pod, as the kubelet projects it (TokenRequest, the progress audience). The baseline,
in the same run: the same jobs and operator, nobody reporting."""

from __future__ import annotations

import json
import statistics
import time
import urllib.error
import urllib.request
from typing import Any

from ddp_operator.model import constants as c

from contenders.ours import Ours
from cost import Meter
from podwatch import PodWatch

INTERVAL = 10.0  # seconds between two reports of a job: the reporter's default


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
    }
