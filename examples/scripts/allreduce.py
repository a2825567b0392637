"""Joins the process group from the environment (env://) and checks one all-reduce.

Works under torchrun, `torch.distributed.launch --use_env` and one process per pod: each of
them provides RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Prints one line per rank:
``ALLREDUCE ok rank=R world=W sum=S``; exits non-zero if the sum is wrong.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    backend = os.environ.get("DDP_BACKEND", "gloo")
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    ok = value.item() == expected
    line = f"ALLREDUCE {'ok' if ok else 'WRONG'} rank={rank} world={world} sum={value.item():.0f}\n"
    sys.stdout.write(line)  # one write: lines of ranks sharing a pipe stay whole
    sys.stdout.flush()
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
