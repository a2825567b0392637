"""A small but real DDP training script: DistributedSampler, DDP, checkpoint and resume.

Launch it with torchrun (or any launcher that sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*).
The backend comes from DDP_BACKEND (injected by ddp-operator): nccl drives cuda:LOCAL_RANK,
hccl drives npu:LOCAL_RANK (needs torch_npu), gloo runs on the CPU.

    torchrun train.py [--epochs 5] [--checkpoint-dir /shared/ckpt]

Rank 0 writes ``checkpoint.pt`` after every epoch and tells the job (``checkpoint``: the job
shows it); a restarted group resumes from the job's last checkpoint (``last_checkpoint``, from
``DDP_RESUME_STEP``/``DDP_RESUME_PATH``), else from ``--checkpoint-dir``'s file. Outside an
image with ``ddp_operator.progress``, it runs the same without telling.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    from ddp_operator.progress import checkpoint, last_checkpoint
except ImportError:  # another image: the script runs as before, the job just does not know

    def checkpoint(step: int, path: str | None = None) -> None:
        pass

    def last_checkpoint() -> None:
        return None


def device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if backend == "hccl":
        import torch_npu  # noqa: F401  (registers the npu device)

        torch.npu.set_device(local_rank)
        return torch.device("npu", local_rank)
    return torch.device("cpu")


def dataset(n: int = 2048) -> TensorDataset:
    """y = 3x - 2 with noise; the same on every rank (fixed seed)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, generator=g)
    y = 3 * x - 2 + 0.01 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_DIR"))
    args = parser.parse_args()

    backend = os.environ.get("DDP_BACKEND", "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = device_for(backend, local_rank)

    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    ckpt = Path(args.checkpoint_dir) / "checkpoint.pt" if args.checkpoint_dir else None
    told = last_checkpoint()
    if told is not None and told.path and Path(told.path).exists():
        ckpt = Path(told.path)  # the job's word: where its last attempt said it saved
    if ckpt and ckpt.exists():
        state = torch.load(ckpt, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"resumed from {ckpt} at epoch {start}", flush=True)
    ddp = DDP(model, device_ids=[local_rank] if device.type != "cpu" else None)

    data = dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    loss_fn = torch.nn.MSELoss()
    loss = torch.tensor(0.0)
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(ddp(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        if rank == 0:
            sys.stdout.write(f"epoch {epoch} loss {mean.item():.5f} world {world}\n")
            sys.stdout.flush()
            if ckpt:
                ckpt.parent.mkdir(parents=True, exist_ok=True)
                tmp = ckpt.with_suffix(".tmp")
                state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}
                torch.save(state, tmp)
                tmp.replace(ckpt)
                checkpoint(epoch, str(ckpt))
        dist.barrier()
    weight, bias = model.weight.item(), model.bias.item()
    # DDP's reducer and the last step's graph hold the process group and tensors: freed while
    # the interpreter is whole, or gloo's threads may abort the process at exit (SIGABRT,
    # "terminate called without an active exception"; pytorch/pytorch#179291).
    del ddp, opt, loss
    gc.collect()
    dist.destroy_process_group()
    if rank == 0:
        sys.stdout.write(f"TRAINED w={weight:.3f} b={bias:.3f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
