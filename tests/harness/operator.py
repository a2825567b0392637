"""The operator as users run it: a `ddp-operator run` process, started and killed by tests."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from .cluster import ROOT, Cluster, exclusively, wait_for

BIN = Path(sys.executable).parent / "ddp-operator"
# Each process's log, in the checkout beside the test reports (not /tmp, where every run left
# a hundred): a failed run's operators can be read there; a fresh clone starts without them.
LOGS = ROOT / ".cluster" / "test-report" / "operators"


@functools.cache
def helpers_image(local: bool) -> str:
    """The image the tests' operators deliver their helpers from, as the chart's operator does
    from its own: $DDP_HELPERS_IMAGE if set (another cluster: an operator image its nodes pull;
    empty: none), else on the local cluster its operator image, this checkout's (built or taken
    from the cache, and on the real node: realnode.sh operator)."""
    if "DDP_HELPERS_IMAGE" in os.environ or not local:
        return os.environ.get("DDP_HELPERS_IMAGE", "")
    from .realnode import realnode

    with exclusively("realnode"):
        return realnode("operator")


class OperatorProcess:
    """A `ddp-operator run` subprocess watching the given namespace pattern."""

    def __init__(self, cluster: Cluster, namespace: str, *extra: str):
        self.cluster = cluster
        self.port = free_port()
        self.liveness = f"http://127.0.0.1:{self.port}/healthz"
        self.args = [str(BIN), "run", "--namespace", namespace, "--liveness", self.liveness, *extra]
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log = Path(tempfile.mkstemp(prefix="ddp-operator-", suffix=".log", dir=LOGS)[1])
        self.proc: subprocess.Popen | None = None

    def start(self) -> OperatorProcess:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            self.args,
            env={"DDP_HELPERS_IMAGE": helpers_image(self.cluster.local), **self.cluster.env()},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until the operator's liveness endpoint answers 200."""

        def ready() -> bool:
            assert self.proc and self.proc.poll() is None, f"operator exited:\n{self.output()}"
            try:
                with urllib.request.urlopen(self.liveness, timeout=1) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_for(ready, timeout=timeout, what="the operator's liveness endpoint")

    def kill(self) -> None:
        """SIGKILL: no clean-up, as a crash or an OOM kill."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in 10 s."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP while in the block, SIGCONT after: an operator too busy to look (what
        happens meanwhile, it sees at once when it goes on)."""
        assert self.proc is not None and self.proc.poll() is None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
