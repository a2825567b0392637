"""A tiny real DDP training that reports its progress to its DDPJob: a linear model learns
y = 3x - 2 from generated data, ``--steps`` steps, each reported with ``report`` (rank 0's count;
the operator puts them on ``status.progress``, ``kubectl get ddpj`` and its metrics).

    torchrun progress_train.py [--steps 300] [--step-time 0.1]

``--step-time`` paces the steps (a real model's step takes that long) so that the progress can
be watched; ``--fail-at-step N`` makes rank 0 exit 3 at step N of attempt 0 (``DDP_ATTEMPT``;
of every attempt below ``--fail-attempts``), to watch a group restart. ``--checkpoint-every K``
saves the model every K steps into ``--checkpoint-dir`` and says so (``checkpoint``); a
restarted group resumes from the job's last checkpoint (``last_checkpoint``: rank 0 loads it,
DDP hands its weights to the others). At the end rank 0 prints the longest time between two steps:
reporting never holds training up, even with the operator down. The backend comes from
``DDP_BACKEND`` (gloo if unset): under nccl (a GPU worker) the model and its data are on
``cuda:LOCAL_RANK``, as in train.py; under gloo, on the CPU.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_operator.progress import checkpoint, last_checkpoint, report


def resume_step(model: torch.nn.Module, opt: torch.optim.Optimizer, device: torch.device) -> int:
    """The step to go on from: the job's last checkpoint where rank 0 can read it (loaded into
    ``model`` and ``opt``), else 0; every rank gets rank 0's answer (on ``device``: NCCL
    broadcasts CUDA tensors only)."""
    start = 0
    last = last_checkpoint()
    if dist.get_rank() == 0 and last and last.path and os.path.exists(last.path):
        state = torch.load(last.path, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = last.step
        print(f"RESUMED from step {start} ({last.path})", flush=True)
    agreed = torch.tensor([start], device=device)
    dist.broadcast(agreed, 0)
    return int(agreed.item())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--step-time", type=float, default=0.1)
    parser.add_argument("--fail-at-step", type=int, default=0)
    parser.add_argument("--fail-attempts", type=int, default=1)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR", "/tmp/ckpt"))
    args = parser.parse_args()

    backend = os.environ.get("DDP_BACKEND", "gloo")
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    device, local = torch.device("cpu"), int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":  # NCCL reduces CUDA tensors only
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    torch.manual_seed(rank)
    ids = [local] if device.type == "cuda" else None
    linear = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(linear.parameters(), lr=0.05)
    start = resume_step(
        linear, opt, device
    )  # before DDP, which hands rank 0's weights to every rank
    model = DDP(linear.to(device), device_ids=ids)
    loss_fn = torch.nn.MSELoss()
    gap, last, t0 = 0.0, time.monotonic(), time.monotonic()
    attempt = int(os.environ.get("DDP_ATTEMPT") or 0)
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(args.batch_size, 1, device=device)
        y = 3 * x - 2
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        time.sleep(args.step_time)
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        samples = (step - start) * args.batch_size * world / (now - t0)
        report(step, args.steps, loss=loss.item(), samples_per_s=samples)
        if args.checkpoint_every and step % args.checkpoint_every == 0 and rank == 0:
            path = os.path.join(args.checkpoint_dir, f"step-{step}.pt")
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            torch.save({"model": linear.state_dict(), "optimizer": opt.state_dict()}, path)
            checkpoint(step, path)
        if rank == 0 and attempt < args.fail_attempts and step == args.fail_at_step:
            print(f"FAILING at step {step} of attempt {attempt}", flush=True)
            return 3
    weight, bias = (p.item() for p in model.module.parameters())
    # Freed before the group, while the interpreter is whole (see train.py).
    model = opt = loss = None
    gc.collect()
    dist.destroy_process_group()
    if rank == 0:
        print(f"TRAINED steps={args.steps} w={weight:.2f} b={bias:.2f} max_step_gap={gap:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
