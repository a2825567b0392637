"""The watch's judgement of its trainer's processes (``inplace_pod``), with real torch
processes: a gloo group that computes is never quiet; once one rank hangs (asleep, the other
blocked in its all_reduce) the watch writes ``quiet`` within a few windows, which its readiness
probe reports. Run as in a pod: one process namespace, the watch not its PID 1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_operator.manifests import inplace_pod

pytestmark = pytest.mark.torch

WINDOW = 2  # seconds; the pods' is QUIET_WINDOW_SECONDS

TRAIN = """
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.randn(128, 128)
while True:
    if dist.get_rank() == 1 and os.path.exists(sys.argv[1]):
        time.sleep(100000)  # hangs; rank 0 waits in its all_reduce
    for _ in range(10):
        x = torch.tanh(x @ x)
    dist.all_reduce(torch.ones(1))
    open(sys.argv[1] + ".computing", "w").close()  # the group computes (its start is behind)
"""


def judgement(root: Path) -> str | None:
    """What the watch last wrote (None: nothing yet)."""
    try:
        return (root / "quiet").read_text().strip()
    except FileNotFoundError:
        return None


def wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_hung_gloo_group_is_quiet_and_a_computing_one_is_not(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("0")
    (tmp_path / "finished").write_text("")
    (tmp_path / "train.py").write_text(TRAIN)
    hang = tmp_path / "hang"
    script = inplace_pod.watch_script(window=WINDOW)
    script = script.replace(inplace_pod.ATTEMPT_DIR, str(tmp_path))
    script = script.replace(inplace_pod.ACTIVITY_DIR, str(tmp_path))
    launch = (
        f"{sys.executable} -m torch.distributed.run --nproc-per-node 2 --master-port 29531 "
        f'{tmp_path}/train.py {hang} > {tmp_path}/log 2>&1 &\n/bin/sh -c "$WATCH"\n'
    )
    env = {**os.environ, "DDP_ATTEMPT": "0", "WATCH": script}
    pod = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "/bin/sh", "-c", launch],
        env=env,
    )
    try:
        # With both cores busy, the group's start (torch's import, the rendezvous) outlasted the
        # windows below, and the hang came before it computed (run 28): its computing is awaited.
        computing = hang.with_name("hang.computing")
        wait(computing.exists, 180, "the group's first all_reduce")
        wait(lambda: judgement(tmp_path) is not None, 60, "the watch's first judgement")
        for _ in range(3):  # three windows of a group that computes
            time.sleep(WINDOW)
            assert judgement(tmp_path) == "", (tmp_path / "log").read_text()
        hang.write_text("")
        began = time.monotonic()
        wait(lambda: judgement(tmp_path) == "quiet", 10 * WINDOW, "the hung group found quiet")
        assert time.monotonic() - began >= WINDOW - 1  # a window of its own, at least
        probe = inplace_pod.watch_container({"image": "i"}, "cm")["readinessProbe"]
        command = probe["exec"]["command"]
        command = [part.replace(inplace_pod.ACTIVITY_DIR, str(tmp_path)) for part in command]
        assert subprocess.run(command).returncode == 1  # the probe fails: the pod not ready
        (tmp_path / "quiet").write_text("")
        assert subprocess.run(command).returncode == 0
    finally:
        pod.kill()
        pod.wait()
