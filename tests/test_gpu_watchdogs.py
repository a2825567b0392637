"""On a real NVIDIA GPU (skipped where none is): the NCCL watchdog variables the operator sets
(``manifests/watchdogs``) are the ones torch reads, with the values given, and a CUDA
out-of-memory error's last words read as the cause, not as another rank's consequence
(``last_words``). Run alone with ``pytest --noconftest -m gpu tests/test_gpu_watchdogs.py``
where only torch is installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from ddp_operator.decide import last_words
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob

pytestmark = [pytest.mark.gpu, pytest.mark.torch]

INIT = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531", RANK="0", WORLD_SIZE="1")
dist.init_process_group("nccl", device_id=torch.device("cuda:0"))
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("ALLREDUCE", t.item(), flush=True)
dist.destroy_process_group()
"""
OOM = "import torch; torch.empty(1 << 50, dtype=torch.uint8, device='cuda')"


def run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_torch_reads_the_watchdog_env_the_operator_sets() -> None:
    gpu = {"resource": "nvidia.com/gpu", "perNode": 1}
    job = resolve(
        ddpjob("g", "ns", nodes=1, accelerator=gpu, stallDetection={"timeoutSeconds": 90})
    )
    trainer = builders.build_worker_pod(job, 0)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in trainer["env"] if e["name"].startswith("TORCH_NCCL_")}
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "90", env
    done = run(INIT, {**env, "TORCH_CPP_LOG_LEVEL": "INFO"})
    assert done.returncode == 0 and "ALLREDUCE 1.0" in done.stdout, done.stderr[-3000:]
    said = done.stderr
    print(said[-4000:])
    for name, value in env.items():  # torch logs the environment it read, name and value
        assert re.search(rf"{name}( \([^)]*\))?: {value}\b", said), (name, value)


def test_a_cuda_out_of_memory_error_reads_as_the_cause() -> None:
    done = run(OOM, {})
    assert done.returncode != 0
    words = last_words.read(done.stderr)
    print(words)
    assert words.summary.startswith("torch.OutOfMemoryError: CUDA out of memory"), words
    assert not last_words.looks_collateral(done.stderr)
