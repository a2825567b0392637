"""S9's training, run by each worker of the goodput job (``goodput_job`` hands it over as
``python3 -c``): a tiny model under DDP (gloo), one step every S9_STEP_S seconds (compute, the
gradients' all_reduce, then sleep for the rest), ``ddp_operator.progress.report`` after every step,
a checkpoint every S9_EVERY steps to the job's host folder (S9_OUT, on the real node), said to the
job (``ddp_operator.progress.checkpoint``); each start resumes from the checkpoint the job says
(``last_checkpoint``: ``DDP_RESUME_STEP``/``DDP_RESUME_PATH``), with no bookkeeping of its own: the
steps after it are lost work when a failure comes. With S9_REPORT=0 it is the script with no
progress code: it neither reports nor says its checkpoints, resumes from the latest one in its
folder, and computes for a fifth of its step rather than sleeping through it (as a real model's
step does: a script that sleeps through its steps is quiet, ``decide/quiet``).

Failures come from S9_FAILURES (JSON: ``[{"attempt", "step", "kind", "worker"}]``), each at the
start of its step in its attempt (DDP_ATTEMPT), in its worker: ``crash`` exits 1, ``oom`` touches
2 GiB past the container's memory limit, ``hang`` sleeps for ever (the other worker then waits in
its all_reduce); ``evict`` is the benchmark's to do. Each process appends what it did, with this
host's clock, to ``a<attempt>-r<rank>.jsonl`` in S9_OUT: the benchmark's measures come from them.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_operator.progress import checkpoint, last_checkpoint, report

OUT = Path(os.environ["S9_OUT"])
ATTEMPT, RANK = int(os.environ["DDP_ATTEMPT"]), int(os.environ["RANK"])
OOM_BYTES = 2 << 30  # past the 1 GiB limit the benchmark sets


def record(event: str, **fields: Any) -> None:
    """One line of this process's record, flushed at once (a killed process keeps its lines)."""
    line = json.dumps({"t": time.time(), "event": event, **fields})
    with open(OUT / f"a{ATTEMPT}-r{RANK}.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def inject(failures: list[dict[str, Any]], step: int) -> None:
    """This worker's failure at the start of ``step`` of this attempt, if the schedule has one."""
    for f in failures:
        if (f["attempt"], f["step"], f["worker"]) != (ATTEMPT, step, RANK):
            continue
        record(f["kind"], step=step)
        if f["kind"] == "crash":
            print(f"S9: crash at step {step} of attempt {ATTEMPT}", flush=True)
            os._exit(1)
        if f["kind"] == "oom":
            print(f"S9: allocating {OOM_BYTES >> 20} MiB at step {step}", flush=True)
            block = bytearray(OOM_BYTES)  # zeroed: every page touched
            raise RuntimeError(f"{len(block) >> 20} MiB allocated and not killed: no memory limit?")
        if f["kind"] == "hang":
            print(f"S9: hanging at step {step} of attempt {ATTEMPT}", flush=True)
            while True:
                time.sleep(3600)


def save(model: torch.nn.Module, step: int) -> None:
    """The model at ``step``, complete before the job is told (a kill mid-write leaves the
    previous one, which the job still names)."""
    path = OUT / f"ckpt-{step}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "model": model.state_dict()}, tmp)
    os.replace(tmp, path)
    if REPORTS:
        checkpoint(step, str(path))


REPORTS = os.environ.get("S9_REPORT", "1") == "1"


def latest(out: Path) -> tuple[int, str] | None:
    """(step, path) of the latest checkpoint in ``out``: what a script without the job's word
    finds for itself."""
    found = [(int(p.stem.removeprefix("ckpt-")), str(p)) for p in out.glob("ckpt-*.pt")]
    return max(found) if found else None


def busy(seconds: float) -> None:
    """Compute for ``seconds`` (a model's step that takes that long)."""
    end, x = time.monotonic() + seconds, torch.randn(64, 64)
    while time.monotonic() < end:
        x = torch.tanh(x @ x)


def train() -> None:
    steps, every = int(os.environ["S9_STEPS"]), int(os.environ["S9_EVERY"])
    step_s = float(os.environ["S9_STEP_S"])
    failures = json.loads(os.environ.get("S9_FAILURES") or "[]")
    record("start")
    timeout = timedelta(seconds=int(os.environ["S9_GLOO_TIMEOUT"]))
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    record("init")
    torch.manual_seed(0)
    model, start = torch.nn.Linear(16, 1), torch.zeros(1, dtype=torch.int64)
    said = last_checkpoint() if REPORTS else None
    last = (said.step, said.path) if said is not None and said.path else None
    if not REPORTS:
        last = latest(OUT)
    if RANK == 0 and last is not None:
        model.load_state_dict(torch.load(last[1])["model"])
        start[0] = last[0]
    dist.broadcast(start, 0)  # and DDP below takes rank 0's parameters
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    record("resume", step=int(start))
    for step in range(int(start) + 1, steps + 1):
        inject(failures, step)
        t0 = time.monotonic()
        opt.zero_grad()
        loss = ddp(torch.randn(32, 16)).pow(2).mean()
        loss.backward()  # the gradients' all_reduce: both workers in step
        opt.step()
        rest = max(0.0, step_s - (time.monotonic() - t0))
        if not REPORTS:  # a fifth of the step computing: its processes are not quiet
            busy(min(rest, step_s / 5))
        time.sleep(max(0.0, step_s - (time.monotonic() - t0)))
        if RANK == 0:
            record("step", step=step)
        if REPORTS:
            report(step, steps, loss=loss.item())
        if RANK == 0 and step % every == 0:
            save(model, step)
    record("done", step=steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        train()
    except BaseException as exc:  # said, recorded, and the process ends failed at once: an
        # interpreter shutdown with a broken gloo group can itself hang
        traceback.print_exc()
        record("error", error=repr(exc)[:500])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
