"""On a real NVIDIA GPU (skipped where none is): an NCCL rank waiting in a collective spins a
core, yet the trainer image's ``.pth`` watch sends where it stands within its 15 s plus a poll,
its flight recorder naming the collective (``progress_stacks``). The same path runs here with
gloo (``test_progress_stacks``: a waiting rank kept busy by a thread), and the decision on the
stacks recorded on an H200 (``test_quiet``). Run alone with ``pytest --noconftest -m gpu
tests/test_gpu_hangs.py`` where only torch is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import plain_pickle
import pytest

from ddp_operator import progress_stacks

from harness import pylibs
from harness.endpoint import Endpoint

pytestmark = [pytest.mark.gpu, pytest.mark.torch]

OPERATOR = Path(__file__).resolve().parents[1] / "operator"
STUCK = textwrap.dedent("""
    import os
    import torch, torch.distributed as dist
    dist.init_process_group(
        "nccl", init_method=os.environ["STORE"], rank=0, world_size=1,
        device_id=torch.device("cuda:0"),
    )
    t = torch.ones(1024, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    torch.cuda._sleep(1 << 42)  # a kernel that never ends
    dist.all_reduce(t)  # queued behind it: #4 never starts
    print(t.sum().item())  # waits here, spinning a core
""")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_nccl_rank_stuck_behind_a_kernel_says_where_it_waits(tmp_path: Path) -> None:
    endpoint = Endpoint()
    script = tmp_path / "train.py"
    script.write_text(STUCK)
    # The helpers first, as the operator delivers them: their sitecustomize starts the watch.
    path = os.pathsep.join([str(pylibs.helpers()), str(OPERATOR), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "STORE": f"file://{tmp_path}/store",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "DDP_PROGRESS_URL": f"http://127.0.0.1:{endpoint.server_address[1]}/progress",
        "DDP_ATTEMPT": "0",
        "TORCH_FR_DUMP_TEMP_FILE": f"{tmp_path}/comm_lib_trace_rank_",
    }
    rank = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not endpoint.got:
            assert time.monotonic() < deadline and rank.poll() is None, rank.communicate()
            time.sleep(0.5)
        busy = cpu_seconds(rank.pid)
        time.sleep(2.0)
        busy = (cpu_seconds(rank.pid) - busy) / 2.0
    finally:
        rank.kill()
        rank.communicate()
        endpoint.shutdown()
    stack = endpoint.got[0]["stack"]
    print(json.dumps(endpoint.got), busy)
    assert busy > 0.5, busy  # its pod's watch would never find it quiet
    assert stack["collectives"] == [
        {"group": "default_pg", "entered": 4, "completed": 3, "op": "all_reduce"}
    ], stack
    assert stack["frames"][-1] == f"{tmp_path.name}/train.py:14 <module>", stack
    assert stack["quietSeconds"] >= 15
    # With it, its recorder's dump, kept where torch writes one on a timeout: the same facts.
    dumped = plain_pickle.load((tmp_path / "comm_lib_trace_rank_0").read_bytes())
    assert progress_stacks.summarize(dumped) == stack["collectives"], dumped
