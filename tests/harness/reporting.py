"""The progress tests' operator and jobs (tests/test_realnode_progress.py and its siblings): an
operator with the progress endpoint, reached by the real node's pods through the pod network's
bridge, watching a namespace of its own; the example script's jobs; what they showed."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import jobs
from .cluster import Cluster, wait_for
from .operator import OperatorProcess, free_port
from .realnode import trainer_job

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


@contextmanager
def reporting_in(cluster: Cluster) -> Iterator[Reporting]:
    """A Reporting in a namespace of its own (not one the session's operator watches), both gone
    after."""
    ns = f"rp-{uuid.uuid4().hex[:6]}"
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
