"""ddp-operator, run as users run it (`ddp-operator run`, its own process), on DDPJobs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ddp_operator.model import constants as c

from cluster import RESULTS, Cluster, free_port, pod_spec, stop, wait_http
from contenders.base import Contender, process_dead

PREFIX = "bench-ours-"
# The scenarios' namespaces: bench-ours-<tag>.
TAGS = ("s1", "s2", "s3", "s4", "s5", "s5l", "s6", "s8")


def ddpjob(name: str, ns: str, nodes: int, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A DDPJob of ``nodes`` workers running the benchmark's pod (or ``spec``)."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodes": nodes, "template": {"spec": spec or pod_spec("trainer")}},
    }


@contextlib.contextmanager
def operator(
    kubeconfig: str,
    pattern: str = f"{PREFIX}*",
    metrics_port: int = 0,
    progress_port: int = 0,
    progress_host: str = "127.0.0.1",
    helpers_image: str = "",
    helpers_delivery: str = "InitContainer",
) -> Iterator[subprocess.Popen]:
    """`ddp-operator run` for the namespaces matching ``pattern``, until the block ends; its
    progress endpoint on ``progress_host``'s ``progress_port`` (0: off); its helpers delivered
    to every worker from ``helpers_image`` by ``helpers_delivery`` (empty: none, whatever
    DDP_HELPERS_IMAGE says here)."""
    address = f"{progress_host}:{progress_port}"
    progress = ["--progress-address", address] if progress_port else []
    helpers = ["--helpers-image", helpers_image, "--helpers-delivery", helpers_delivery]
    env = {k: v for k, v in os.environ.items() if k != "DDP_HELPERS_IMAGE"}
    port = free_port()
    log = RESULTS / "operator.log"
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ddp-operator"),
                "run",
                "--namespace",
                pattern,
                "--liveness",
                f"http://127.0.0.1:{port}/healthz",
                "--quiet",
                "--metrics-port",
                str(metrics_port),
                *progress,
                *(helpers if helpers_image else ()),
            ],
            env={**env, "KUBECONFIG": kubeconfig},
            stdout=logf,
            stderr=logf,
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", proc, time.monotonic() + 60, "operator")
            yield proc
        finally:
            stop(proc)


class Ours(Contender):
    """DDPJobs; namespaces bench-ours-* (the base class's names), which the operator watches."""

    name, title = "ours", "ours"
    job_label = c.LABEL_JOB
    job_api = (c.GROUP, c.VERSION, c.PLURAL)

    proc: subprocess.Popen | None = None
    metrics_port = 0
    progress_port = 0  # its progress endpoint, on as the chart has it (S8 reports to it)
    progress_host = "127.0.0.1"  # where it listens (S9's pods on the real node: its bridge)
    helpers_image = ""  # the helpers' delivery (--helpers-image): none

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        # Every scenario's namespace exists before the operator starts, so that it watches them
        # all from its start: a namespace made later would time kopf's discovery of it too.
        for tag in TAGS:
            self.used.add(self.cluster.namespace(self.ns_name(tag)))
        self.metrics_port, self.progress_port = free_port(), free_port()
        with operator(
            self.cluster.kubeconfig,
            pattern=self.ns_name("*"),
            metrics_port=self.metrics_port,
            progress_port=self.progress_port,
            progress_host=self.progress_host,
            helpers_image=self.helpers_image,
        ) as proc:
            self.proc = proc
            try:
                yield
            finally:
                self.proc = None

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def requests(self) -> dict[str, int]:
        """The operator's API requests so far, by verb (its ddp_operator_api_requests)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        found: dict[str, int] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ddp_operator_api_requests_total":
                    verb = sample.labels["verb"]
                    found[verb] = found.get(verb, 0) + int(sample.value)
        return dict(sorted(found.items()))

    def dead(self) -> str | None:
        alive = self.proc is not None and self.proc.poll() is None
        return None if alive else process_dead(None, "ddp-operator", RESULTS / "operator.log")

    def jobs(self, ns: str, names: list[str], nodes: int) -> list[dict[str, Any]]:
        return [ddpjob(n, ns, nodes) for n in names]


class OursHelpers(Ours):
    """Ours with its helpers delivered to every worker (``--helpers-image``, an init container
    copying them): ``helpers_cost.py`` runs it beside ``Ours`` for what the delivery costs. Its
    namespaces are bench-helpers-*, which Ours' operator (bench-ours-*) does not watch."""

    name, title = "ours-helpers", "ours with helpers"

    def __init__(self, cluster: Cluster, pool: ThreadPoolExecutor, image: str) -> None:
        super().__init__(cluster, pool)
        self.helpers_image = image

    def ns_name(self, tag: str) -> str:
        return f"bench-helpers-{tag}"
