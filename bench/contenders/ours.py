"""ddp-operator, run as users run it (`ddp-operator run`, its own process), on DDPJobs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddp_operator import constants as c

from cluster import RESULTS, free_port, pod_spec, stop, wait_http
from contenders.base import Contender, process_dead

PREFIX = "bench-ours-"
TAGS = ("s1", "s2", "s3", "s4", "s5", "s6")  # the scenarios' namespaces: bench-ours-<tag>


def ddpjob(name: str, ns: str, nodes: int, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A DDPJob of ``nodes`` workers running the benchmark's pod (or ``spec``)."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodes": nodes, "template": {"spec": spec or pod_spec("trainer")}},
    }


@contextlib.contextmanager
def operator(kubeconfig: str, pattern: str = f"{PREFIX}*") -> Iterator[subprocess.Popen]:
    """`ddp-operator run` for the namespaces matching ``pattern``, until the block ends."""
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
            ],
            env={**os.environ, "KUBECONFIG": kubeconfig},
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

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        # Every scenario's namespace exists before the operator starts, so that it watches them
        # all from its start: a namespace made later would time kopf's discovery of it too.
        for tag in TAGS:
            self.used.add(self.cluster.namespace(f"bench-{self.name}-{tag}"))
        with operator(self.cluster.kubeconfig) as proc:
            self.proc = proc
            try:
                yield
            finally:
                self.proc = None

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def dead(self) -> str | None:
        alive = self.proc is not None and self.proc.poll() is None
        return None if alive else process_dead(None, "ddp-operator", RESULTS / "operator.log")

    def jobs(self, ns: str, names: list[str], nodes: int) -> list[dict[str, Any]]:
        return [ddpjob(n, ns, nodes) for n in names]
