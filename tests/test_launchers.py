"""Every launch style runs unchanged under `kubectl ddp local`, with real torch.distributed:
every rank joins one process group and an all-reduce gives the right value."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.cluster import ROOT, wait_for

pytestmark = pytest.mark.torch

KUBECTL_DDP = str(Path(sys.executable).parent / "kubectl-ddp")
LAUNCHERS = ROOT / "examples" / "launchers"
RESULT = re.compile(r"ALLREDUCE (\w+) rank=(\d+) world=(\d+) sum=(\d+)")

# (manifest, expected world size): one torchrun style, mp.spawn and one process per pod, which
# between them use every way `kubectl ddp local` starts and wires processes. All seven styles of
# examples/launchers run in real pods in tests/test_realnode_jobs.py.
STYLES = [
    ("torchrun-c10d", 4),
    ("mp-spawn", 4),
    ("env-one-per-pod", 2),
]


def run_local(manifest: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KUBECTL_DDP, "local", str(manifest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(("style", "world"), STYLES, ids=[s for s, _ in STYLES])
def test_launch_style_forms_one_process_group(style: str, world: int) -> None:
    result = run_local(LAUNCHERS / f"{style}.yaml")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    found = RESULT.findall(out)
    assert sorted(int(r) for _, r, _, _ in found) == list(range(world)), out
    assert {(ok, int(w), int(s)) for ok, _, w, s in found} == {
        ("ok", world, world * (world + 1) // 2)
    }
    assert "Succeeded" in result.stdout


def test_worker_exit_code_fails_the_job_and_is_reported() -> None:
    result = run_local(LAUNCHERS / "fail-exit3.yaml", timeout=60)
    assert result.returncode == 3
    assert "Failed" in result.stderr and "fail-exit3-worker-1 exited with code 3" in result.stderr
    assert "worker-1 | worker 1 giving up" in result.stdout


def test_every_launcher_example_is_a_valid_ddpjob() -> None:
    for path in LAUNCHERS.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        assert doc["kind"] == "DDPJob" and doc["spec"]["template"]["spec"]["containers"], path


def test_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    marker = f"ddp-ctrl-c-{os.getpid()}"
    manifest = tmp_path / "sleepy.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "ddp-operator.io/v1alpha1",
                "kind": "DDPJob",
                "metadata": {"name": "sleepy"},
                "spec": {
                    "nodes": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "x",
                                    "command": [
                                        "python",
                                        "-c",
                                        "import time; time.sleep(300)",
                                        marker,
                                    ],
                                }
                            ]
                        }
                    },
                },
            }
        )
    )
    proc = subprocess.Popen(
        [KUBECTL_DDP, "local", str(manifest)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def running() -> int:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return sum(marker in line and "ps -eo" not in line for line in ps.splitlines())

    wait_for(lambda: running() >= 2, timeout=30, what="both workers to start")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    time.sleep(0.5)
    assert running() == 0, "worker processes survived Ctrl-C"
