"""The real node on a host with a container runtime of its own (Debian's containerd, Docker's):
a host shim or runc that comes first on the PATH of whoever starts the node is never run (once,
every sandbox failed with the host's containerd-shim-runc-v2); the node runs on its own
binaries and a job runs to Succeeded."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import jobs
from harness.cluster import ROOT, Cluster, wait_for
from harness.realnode import NODE, REALNODE_SH, trainer_job

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(900), pytest.mark.serial]

RN = ROOT / ".cluster" / "realnode"
# What a host's own shim or runc would do here: fail (and say it ran).
DECOY = '#!/bin/sh\necho "$0 $*" >>"{log}"\necho "decoy $0 ran" >&2\nexit 1\n'


def containerd_pid() -> int:
    return int((RN / "containerd.pid").read_text())


def restart_containerd(path: str) -> int:
    """Stop the node's containerd, start the node again (realnode.sh up starts only what is not
    running) with ``path`` as the PATH it is started from; the new containerd's pid."""
    old = containerd_pid()
    os.kill(old, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{old}").exists(), timeout=30, what="containerd to stop")
    done = subprocess.run(
        [str(REALNODE_SH), "up"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return containerd_pid()


@pytest.fixture
def decoys(tmp_path: Path, images: dict[str, str]) -> Iterator[tuple[Path, int]]:
    """A folder of decoys (containerd-shim-runc-v2, runc) first on the PATH the node's
    containerd is started from; the log they would write and containerd's pid. Afterwards
    containerd is started again as usual."""
    folder, log = tmp_path / "host-bin", tmp_path / "decoys.log"
    folder.mkdir()
    for name in ("containerd-shim-runc-v2", "runc", "containerd-shim"):
        (folder / name).write_text(DECOY.format(log=log))
        (folder / name).chmod(0o755)
    pid = restart_containerd(f"{folder}{os.pathsep}{os.environ['PATH']}")
    try:
        yield log, pid
    finally:
        restart_containerd(os.environ["PATH"])


def test_a_host_shim_and_runc_first_on_path_are_never_run(
    cluster: Cluster, namespace: str, operator, images: dict[str, str], decoys
) -> None:
    log, pid = decoys
    script = "exec torchrun examples/scripts/allreduce.py"
    job = trainer_job("decoy", namespace, images["trainer"], ["sh", "-c", script])
    jobs.apply(cluster, job)
    jobs.wait_phase(cluster, namespace, "decoy", "Succeeded", timeout=300)
    node = cluster.core.read_node(NODE)
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert ready.status == "True", ready
    assert not log.exists(), log.read_text()
    environ = dict(
        line.split("=", 1)
        for line in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in line
    )
    assert "host-bin" not in environ["PATH"], environ["PATH"]  # its own PATH: its binaries first
    assert Path(environ["PATH"].split(os.pathsep)[0], "containerd-shim-runc-v2").is_file()
    # And the shims running the pods are the node's own.
    shims = subprocess.run(
        ["pgrep", "-a", "-f", "containerd-shim-runc-v2"], capture_output=True, text=True
    ).stdout
    assert "host-bin" not in shims, shims
    assert containerd_pid() == pid  # the same containerd throughout
