"""ModelArts-style launcher: one container per node, `mp.spawn` one process per device.

    python spawn.py --init_method tcp://HOST:PORT --rank NODE_RANK --world_size NODES

Processes per node: the GPU count, else MA_NUM_GPUS (what ModelArts sets), else 1.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank: int, args: argparse.Namespace, nprocs: int) -> None:
    rank = args.rank * nprocs + local_rank
    world = args.world_size * nprocs
    backend = os.environ.get("DDP_BACKEND", "gloo")
    dist.init_process_group(
        backend,
        init_method=args.init_method,
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    value = torch.tensor([float(rank + 1)])
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        value = value.cuda()
    dist.all_reduce(value)
    ok = value.item() == world * (world + 1) / 2
    line = f"ALLREDUCE {'ok' if ok else 'WRONG'} rank={rank} world={world} sum={value.item():.0f}\n"
    sys.stdout.write(line)  # one write: lines of ranks sharing a pipe stay whole
    sys.stdout.flush()
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--init_method", required=True)
    parser.add_argument("--rank", type=int, required=True, help="node rank")
    parser.add_argument("--world_size", type=int, required=True, help="number of nodes")
    args = parser.parse_args()
    nprocs = torch.cuda.device_count() or int(os.environ.get("MA_NUM_GPUS", "1"))
    mp.spawn(worker, args=(args, nprocs), nprocs=nprocs, join=True)


if __name__ == "__main__":
    main()
