"""S4: J jobs x 4 workers applied at a steady rate over 60 s, then every pod succeeds: the time to
all Running and to all jobs done, the controller's memory as the jobs come (its slope per job),
and the CPU per 1000 pods. Its namespace is left full: the caller deletes it."""

from __future__ import annotations

import time
import uuid
from typing import Any

from contenders.base import Contender
from cost import Meter, cluster_cpu, memory_mb
from podwatch import PodWatch
from scenarios.completion import finish
from scenarios.jobwatch import JobWatch

WORKERS = 4


def scale(ct: Contender, jobs: int, over: float = 60.0) -> dict[str, Any]:
    """Run S4 with ``ct`` (its controller running, one process) and return its numbers."""
    ns = ct.namespace("s4")
    names = [f"s{k}-{uuid.uuid4().hex[:4]}" for k in range(jobs)]
    marks = sorted({jobs // 4, jobs // 2, jobs})
    rss: dict[int, float] = {}
    (pid,) = ct.pids()

    def sample() -> None:  # the RSS once the pods of the first `mark` jobs' worth are Running
        while len(rss) < len(marks) and len(pods.running) >= marks[len(rss)] * WORKERS:
            rss[marks[len(rss)]] = round(memory_mb(pid)[0], 1)

    pods = PodWatch(ct.cluster, ns, ct.dead)
    done = JobWatch(ct, ns)
    try:
        meter = Meter([pid]).start()
        t0 = time.monotonic()
        batch = max(1, jobs // 60)
        for i in range(0, jobs, batch):
            ct.create(ns, names[i : i + batch], WORKERS)
            sample()
            time.sleep(max(0.0, t0 + over * (i + batch) / jobs - time.monotonic()))
        doing = f"S4 {ct.title}: {jobs} jobs x {WORKERS} -> Running"
        total = jobs * WORKERS

        def all_running() -> bool:  # sampling the marks the applying loop has not seen yet
            sample()
            return len(pods.running) >= total

        pods.wait(all_running, doing)
        running = max(pods.running.values()) - t0
        t1 = time.monotonic()
        finish(ct.cluster, ct.pool, ns, [pods.names[u] for u in pods.running], 0)
        pods.wait(
            lambda: len(pods.succeeded) >= jobs * WORKERS,
            f"S4 {ct.title}: {jobs * WORKERS} pods -> Succeeded",
        )
        done.wait(jobs, f"S4 {ct.title}: {jobs} jobs -> {ct.done}")
        finished = max(done.done.values()) - t1
        cpu = meter.stop()
        peak = memory_mb(pid)[1]
    finally:
        done.close()
        pods.close()
    slope = (rss[marks[-1]] - rss[marks[0]]) * 1024 / max(1, marks[-1] - marks[0])
    return {
        "jobs": jobs,
        "pods": jobs * WORKERS,
        "running_s": round(running, 2),
        "succeeded_s": round(finished, 2),
        "rss_mb": rss,
        "peak_rss_mb": round(peak, 1),
        "rss_kb_per_job": round(slope, 1),
        "cpu": cpu,
        "cpu_per_1000_pods": (total * 1000 / (jobs * WORKERS))
        if (total := cluster_cpu(cpu)) is not None
        else float("nan"),
    }
