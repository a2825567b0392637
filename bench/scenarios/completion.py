"""S3: K running jobs x 4 workers whose pods all succeed at once; per job, the time from the last
success it waits for (every pod's; Kubeflow v1: its Master's) to its "finished well" condition,
both seen by watches of the same client."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from cluster import Cluster
from contenders.base import Contender, drain
from cost import Meter
from podwatch import PodWatch
from scenarios.jobwatch import JobWatch
from scenarios.startup import SETTLE, Run

EXIT = "kwok.ddp-operator.io/exit-code"  # hack/cluster/manifests/stages.yaml: pod-finish


def finish(
    cluster: Cluster, pool: ThreadPoolExecutor, ns: str, names: list[str], code: int
) -> None:
    """Make the kwok pods ``names`` terminate with exit ``code``."""
    body = {"metadata": {"annotations": {EXIT: str(code)}}}
    list(
        pool.map(
            lambda p: drain(cluster.core.patch_namespaced_pod(p, ns, body, _preload_content=False)),
            names,
        )
    )


def completion(ct: Contender, jobs: int) -> tuple[list[float], Run]:
    """Per job, ms from its last pod's success to its condition; and the CPU of that phase."""
    ns = ct.namespace("s3")
    names = [f"c{k}" for k in range(jobs)]
    pods = PodWatch(ct.cluster, ns, ct.dead)
    done = JobWatch(ct, ns)
    try:
        ct.create(ns, names, 4)
        pods.wait_running(jobs * 4, f"S3 {ct.title}: {jobs} jobs x 4 -> Running")
        time.sleep(1)  # every job has seen its pods Running
        meter = Meter(ct.pids()).start()
        t0 = time.monotonic()
        finish(ct.cluster, ct.pool, ns, [pods.names[u] for u in pods.running], 0)
        doing = f"S3 {ct.title}: {jobs * 4} pods -> Succeeded"
        pods.wait(lambda: len(pods.succeeded) >= jobs * 4, doing)
        done.wait(jobs, f"S3 {ct.title}: {jobs} jobs -> {ct.done}")
        seconds = max(done.done.values()) - t0
        time.sleep(SETTLE)
        run = Run(seconds, jobs * 4, meter.stop())
    finally:
        done.close()
        pods.close()
    lat = []
    for n in names:
        mine = [u for u in pods.succeeded if pods.labels[u].get(ct.job_label) == n]
        last = max(pods.succeeded[u] for u in mine if ct.decides(pods.labels[u]))
        lat.append((done.done[n] - last) * 1000)
    ct.drop(ns)
    return lat, run


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]
