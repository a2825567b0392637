"""Which cluster the tests use, and clients for it.

``KUBECONFIG`` set: that cluster (kind, a real one). Otherwise the local control plane of
``hack/cluster/cluster.sh``, brought up once per test session (and taken down again if this
session started it, unless ``DDP_KEEP_CLUSTER=1``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "hack" / "cluster" / "cluster.sh"
LOCAL_KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
CRD_FILE = ROOT / "crds" / "ddpjobs.ddp-operator.io.yaml"
BUILD_SH = ROOT / "hack" / "cluster" / "build.sh"

T = TypeVar("T")


class KubectlError(subprocess.CalledProcessError):
    """A kubectl that failed, saying what kubectl said: a CalledProcessError's own text has
    only the command and its exit status, and a test's failure must say why."""

    def __str__(self) -> str:
        said = (self.stderr or self.stdout or "").strip()[-2000:]
        return f"{super().__str__()} It said: {said or '(nothing)'}"


@dataclass
class Cluster:
    """A reachable cluster: its kubeconfig, whether it is the local kwok one, and clients."""

    kubeconfig: Path
    local: bool
    started_here: bool
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run kubectl against this cluster; output captured as text. With ``check``, a failure
        raises KubectlError, which says what kubectl said."""
        cmd = [tool("kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=120)
        if check and done.returncode != 0:
            raise KubectlError(done.returncode, cmd, done.stdout, done.stderr)
        return done

    def env(self) -> dict[str, str]:
        """Environment for subprocesses (the operator, the CLI) that should use this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}


@functools.cache
def tool(name: str) -> str:
    """Path of a pinned tool (kubectl, helm, kwokctl): the local cluster's link if there is
    one; else, with KUBECONFIG set, the one on PATH; else from the build cache (built if
    need be)."""
    linked = ROOT / ".cluster" / "bin" / name
    if linked.exists():
        return str(linked)
    if os.environ.get("KUBECONFIG") and shutil.which(name):
        return str(shutil.which(name))
    built = subprocess.run([str(BUILD_SH)], capture_output=True, text=True, check=True).stdout
    return str(Path(built.strip()) / name)


def _local_running() -> bool:
    return subprocess.run([str(CLUSTER_SH), "status"], capture_output=True).returncode == 0


@contextlib.contextmanager
def exclusively(name: str) -> Iterator[None]:
    """Hold the checkout's lock ``name`` (a file under .cluster/locks): test sessions running at
    once (pytest-xdist's workers) take turns at a step that must not run twice at the same time,
    such as bringing the cluster, the real node or Kueue up."""
    locks = ROOT / ".cluster" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def connect() -> Cluster:
    """Use KUBECONFIG if set, else bring the local cluster up (or reuse it).

    One of pytest-xdist's workers brings it up if none runs, but none takes it down: the others
    still use it (make test brings it up and down around its sessions)."""
    given = os.environ.get("KUBECONFIG")
    if given:
        path, started = Path(given.split(os.pathsep)[0]), False
        local = path.resolve() == LOCAL_KUBECONFIG.resolve()
    else:
        with exclusively("cluster-up"):
            started = not _local_running()
            if started:
                subprocess.run([str(CLUSTER_SH), "up"], check=True)
        started = started and "PYTEST_XDIST_WORKER" not in os.environ
        path, local = LOCAL_KUBECONFIG, True
    api = config.new_client_from_config(config_file=str(path))
    return Cluster(kubeconfig=path, local=local, started_here=started, api=api)


def disconnect(cluster: Cluster) -> None:
    """Take the local cluster down again if this session brought it up."""
    cluster.api.close()
    if cluster.started_here and os.environ.get("DDP_KEEP_CLUSTER") != "1":
        subprocess.run([str(CLUSTER_SH), "down"], check=False)


SLOWEST_POLL = 0.5  # seconds: wait_for's longest pause


def wait_for(
    probe: Callable[[], T | None],
    timeout: float = 60,
    interval: float = 0.1,
    what: str = "",
    slowest: float = SLOWEST_POLL,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout``.
    The pause between two polls grows from ``interval`` by a quarter each time, to ``slowest``
    at most (or ``interval``, if longer): a state that comes soon is seen soon, and a long wait
    costs the API server and this process a fifth of the polls at ``interval`` (each poll of a
    DDPJob costs the two about 5 ms of CPU). A wait for a state that may last under a second
    (a restart on kwok's nodes) passes ``slowest=interval``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    pause, slowest = interval, max(interval, slowest)
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(pause * 1.25, slowest)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or probe}; last: {last!r}")
