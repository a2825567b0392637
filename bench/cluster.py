"""The cluster the benchmark runs on: its clients, namespaces, the benchmark's own fake nodes, and
the helpers for the controller processes it starts (ours, Kubeflow's, JobSet's)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CONCURRENCY = 32  # the raw client's and our operator's API concurrency
# The benchmark's fake nodes: tainted, so that nothing else lands on them, and large enough for
# S4 (4000 pods) and S5 (2048 pods). Every contender's pods select them and tolerate the taint.
BENCH_LABEL = "ddp-operator.io/bench"
BENCH_NODES, BENCH_NODE_PODS = 8, 1000
POD_SPEC: dict[str, Any] = {
    "nodeSelector": {BENCH_LABEL: "true"},
    "tolerations": [{"key": BENCH_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}


@contextlib.contextmanager
def unless(status: int) -> Iterator[None]:
    """Let an API error of ``status`` (409: already there; 404: already gone) pass; any other
    error is raised: the benchmark never swallows one."""
    try:
        yield
    except client.exceptions.ApiException as exc:
        if exc.status != status:
            raise


def log(msg: str) -> None:
    """One line of progress, timestamped."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pod_spec(container: str) -> dict[str, Any]:
    """The pod spec every contender runs: one container on the benchmark's nodes."""
    return {**POD_SPEC, "containers": [{"name": container, "image": "bench", "command": ["t"]}]}


class Cluster:
    """Clients of the cluster in KUBECONFIG (or the local one), throttles lifted."""

    def __init__(self) -> None:
        self.kubeconfig = os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig")
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.api.configuration.connection_pool_maxsize = 64
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run the local cluster's kubectl (kubectl from PATH for another cluster)."""
        local = ROOT / ".cluster" / "bin" / "kubectl"
        binary = str(local) if local.exists() else "kubectl"
        done = subprocess.run(
            [binary, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=120,
            input=input,
        )
        if done.returncode:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def namespace(self, name: str) -> str:
        """Create ``name`` (if new; once gone if it is being deleted) and wait for its default
        service account."""
        found = self.core.list_namespace(field_selector=f"metadata.name={name}").items
        if found and found[0].status.phase == "Terminating":
            self.drop(name)
        with unless(409):
            self.core.create_namespace({"metadata": {"name": name}})
        deadline = time.monotonic() + 30
        while not self.core.list_namespaced_service_account(name).items:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no service account in {name}")
            time.sleep(0.1)
        return name

    def drop(self, *names: str, wait: bool = True) -> None:
        """Delete namespaces and (``wait``) wait until they are gone: the next run starts on a
        quiet cluster."""
        for ns in names:
            with unless(404):
                self.core.delete_namespace(ns, propagation_policy="Background")
        for ns in names if wait else ():
            self.wait_gone(
                ns,
                lambda ns=ns: bool(
                    self.core.list_namespace(field_selector=f"metadata.name={ns}").items
                ),
            )

    def wait_gone(self, ns: str, also: Any = lambda: False, timeout: float = 300) -> None:
        """Wait until ``ns`` has no pods (and ``also()`` is false)."""
        deadline = time.monotonic() + timeout
        while self.core.list_namespaced_pod(ns, limit=1).items or also():
            if time.monotonic() > deadline:
                left = len(self.core.list_namespaced_pod(ns).items)
                raise TimeoutError(f"{ns}: still {left} pods after {timeout:.0f} s")
            time.sleep(0.2)

    def bench_nodes(self) -> None:
        """Register the benchmark's fake nodes (kwok), if missing, and wait until they are Ready."""
        names = [f"bench-node-{i}" for i in range(BENCH_NODES)]
        res = {"cpu": "1000", "memory": "4Ti", "pods": str(BENCH_NODE_PODS)}
        for name in names:
            node = {
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name, BENCH_LABEL: "true"},
                },
                "spec": {"taints": [{"key": BENCH_LABEL, "value": "true", "effect": "NoSchedule"}]},
                "status": {"allocatable": res, "capacity": res},
            }
            with unless(409):
                self.core.create_node(node)
        self.kubectl(
            "wait", "--for=condition=Ready", "--timeout=120s", *[f"node/{n}" for n in names]
        )


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, deadline: float, log_name: str) -> None:
    """Wait until ``url`` answers, failing if the process exits or the deadline passes."""
    while True:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=1)
            return
        if proc.poll() is not None:
            raise RuntimeError(
                f"{log_name} exited ({proc.returncode}); see bench/results/{log_name}.log"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer; see bench/results/{log_name}.log")
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
