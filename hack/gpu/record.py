"""Records what torch and NCCL say and dump when a collective hangs on a real GPU, for
``tests/data/torch`` (run on a lent GPU machine, as root, from the repository's root:
``python3 hack/gpu/record.py OUT``; about 3 minutes). Every case runs at once, world 1 (NCCL
refuses two ranks on one GPU), each with the NCCL watchdog env the operator sets and the trainer
image's ``.pth`` watch installed as the image installs it:

* ``python``: ``python train.py``, a collective stuck behind a kernel that never ends; the
  process group's timeout (PG_TIMEOUT) ends it, the flight recorder dumps, torch aborts;
* ``torchrun``: the same under torchrun, without ``@record``;
* ``pipe``: the same with torch's timeout far off; its recorder is dumped on demand through its
  pipe, then SIGABRT with ``PYTHONFAULTHANDLER`` prints its Python stack;
* the stacks the in-process watch sends (a local HTTP endpoint stands for the operator's), the
  rank's CPU share as the pod's watch samples it, the recorder's JSON mid-hang, and the
  examples under NCCL. The GPU tests run alone (``docs/development/tests.md``).

Out: ``<case>.log``, ``dumps/<case>_rank_0`` and ``summary.json``."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEPS = "--steps 30 --step-time 0.01"
TORCHRUN = "-m torch.distributed.run --nproc-per-node 1 --master-port"
PG_TIMEOUT = 40  # seconds: the watch says where the rank stands after 15 s of it
TRAIN = """\
import os
from datetime import timedelta

import torch
import torch.distributed as dist

timeout = timedelta(seconds=float(os.environ["PG_TIMEOUT"]))
dist.init_process_group("nccl", device_id=torch.device("cuda:0"), timeout=timeout)
t = torch.ones(1024, device="cuda")
for _ in range(3):
    dist.all_reduce(t)
torch.cuda.synchronize()
print("three all_reduces done", flush=True)
torch.cuda._sleep(1 << 42)  # a kernel that never ends
dist.all_reduce(t)  # queued behind it: never starts
print(t.sum().item())  # waits here
"""
PROBE = """\
import json, os, sys, threading, time
import torch._C._distributed_c10d as c10d

def probe():
    time.sleep(20)
    said = {}
    for name in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
        dump = getattr(c10d, name, None)
        try:
            said[name] = json.loads(dump(True, True)) if dump else None
        except Exception as exc:
            said[name] = repr(exc)
    from ddp_operator import progress_stacks
    said["collectives"] = progress_stacks.collectives()
    said["standing"] = progress_stacks.standing()
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(said, f)
    os._exit(0)

threading.Thread(target=probe, daemon=True).start()
sys.argv = ["train.py"]
exec(compile(open("train.py").read(), "train.py", "exec"))
"""


class Endpoint(http.server.ThreadingHTTPServer):
    """Stands for the operator's progress endpoint: keeps what is posted."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        got, t0 = self.got, self.t0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.append({"t": round(time.monotonic() - t0, 1), "body": json.loads(body)})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/progress"


HELPERS = Path("/ddp-operator/helpers")


def install_helpers() -> None:
    """As the operator delivers its helpers to a worker (its image's /opt/ddp-operator/helpers:
    the repository's helpers/ and ddp_operator's progress modules), at HELPERS, which goes first
    on the cases' PYTHONPATH: its sitecustomize starts the stacks watch."""
    sys.path[:0] = [str(ROOT / "operator")]
    from ddp_operator.manifests.helpers_pod import MODULES

    shutil.rmtree(HELPERS, ignore_errors=True)
    shutil.copytree(ROOT / "helpers", HELPERS)
    (HELPERS / "ddp_operator").mkdir()
    for name in MODULES:
        shutil.copy(ROOT / "operator" / "ddp_operator" / name, HELPERS / "ddp_operator")


def watchdog_env() -> dict[str, str]:
    """The env the operator gives an NCCL worker with stall detection on (timeout 300 s)."""
    sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "tests")]
    from ddp_operator.manifests import builders
    from ddp_operator.model.jobspec import resolve

    from jobs import ddpjob

    gpu = {"resource": "nvidia.com/gpu", "perNode": 1}
    job = resolve(
        ddpjob("g", "ns", nodes=1, accelerator=gpu, stallDetection={"timeoutSeconds": 300})
    )
    trainer = builders.build_worker_pod(job, 0)["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in trainer["env"] if e["name"].startswith("TORCH_")}


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            pass
    return found


def sample(proc: subprocess.Popen[bytes], under_torchrun: bool, into: list[Any]) -> None:
    """The rank's CPU share every 2 s, as the pod's watch reads /proc."""
    t0, last = time.monotonic(), None
    while proc.poll() is None:
        pids = children(proc.pid) if under_torchrun else [proc.pid]
        try:
            ticks, now = sum(cpu_ticks(p) for p in pids), time.monotonic()
        except OSError:
            break
        if last and pids:
            into.append([round(now - t0, 1), round((ticks - last[0]) / 100 / (now - last[1]), 3)])
        last = (ticks, now) if pids else None
        time.sleep(2)


def main() -> None:
    out = Path(sys.argv[1])
    (out / "dumps").mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/record")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    (work / "probe.py").write_text(PROBE)
    install_helpers()
    endpoint = Endpoint()
    base = {
        **os.environ,
        **watchdog_env(),
        "PG_TIMEOUT": str(PG_TIMEOUT),
        "DDP_PROGRESS_URL": endpoint.url,
        "DDP_ATTEMPT": "0",
        "PYTHONPATH": str(HELPERS),
        "MASTER_ADDR": "127.0.0.1",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "PYTHONUNBUFFERED": "1",
    }
    summary: dict[str, Any] = {"env": watchdog_env(), "pg_timeout": PG_TIMEOUT}
    cases = {
        "python": [sys.executable, "train.py"],
        "torchrun": [sys.executable, *TORCHRUN.split(), "29602", "train.py"],
        "pipe": [sys.executable, "train.py"],
        "probe": [sys.executable, "probe.py"],
    }
    ports = {"python": "29601", "torchrun": "29602", "pipe": "29603", "probe": "29604"}
    cases = {k: v for k, v in cases.items() if k in (sys.argv[2:] or cases)}
    procs, samples, started = {}, {}, {}
    logs = contextlib.ExitStack()
    for name, cmd in cases.items():
        env = {
            **base,
            "MASTER_PORT": ports[name],
            "TORCH_FR_DUMP_TEMP_FILE": f"{out}/dumps/{name}_rank_",
        }
        if name == "pipe":
            env.update(
                PG_TIMEOUT="600",
                PYTHONFAULTHANDLER="1",
                TORCH_NCCL_DEBUG_INFO_PIPE_FILE=f"{work}/pipe_",
            )
        if name == "probe":
            env.update(PG_TIMEOUT="600", PROBE_OUT=f"{work}/probe.json", DDP_PROGRESS_URL="")
        log = logs.enter_context(((work if name == "probe" else out) / f"{name}.log").open("wb"))
        started[name] = time.monotonic()
        procs[name] = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        samples[name] = []
        threading.Thread(
            target=sample, args=(procs[name], name == "torchrun", samples[name]), daemon=True
        ).start()
    # the pipe: once its rank has hung 20 s, dump on demand, then SIGABRT for its Python stack
    time.sleep(30)
    if "pipe" in procs:
        pipe_dump(work, out, procs["pipe"], summary)
    for name, proc in procs.items():
        try:
            proc.wait(timeout=200 - (time.monotonic() - started[name]))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        summary[f"{name}_rc"] = proc.returncode
        summary[f"{name}_seconds"] = round(time.monotonic() - started[name], 1)
        summary[f"{name}_cpu_share"] = samples[name]
    logs.close()
    summary["posts"] = endpoint.got
    probe = work / "probe.json"
    summary["probe"] = json.loads(probe.read_text()) if probe.exists() else None
    if summary["probe"]:
        (out / "fr-nccl-active.json").write_text(json.dumps(summary["probe"], indent=1))
    if (work / "probe.log").exists():
        summary["probe_log_tail"] = (work / "probe.log").read_text(errors="replace")[-3000:]
    summary["dumps"] = {p.name: p.stat().st_size for p in (out / "dumps").iterdir()}
    if not summary["dumps"]:
        (out / "dumps").rmdir()
    summary["examples"] = examples(work, {**base, "DDP_PROGRESS_URL": endpoint.url})
    summary["posts_all"] = len(endpoint.got)
    versions = "import torch; print(torch.__version__, torch.cuda.nccl.version())"
    said = subprocess.run([sys.executable, "-c", versions], capture_output=True, text=True)
    summary["versions"] = said.stdout.strip()
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(
        json.dumps(
            {k: v for k, v in summary.items() if not k.endswith("cpu_share") and k != "env"},
            indent=1,
        )
    )


def pipe_dump(
    work: Path, out: Path, proc: subprocess.Popen[bytes], summary: dict[str, Any]
) -> None:
    pipe = work / "pipe_0.pipe"
    summary["pipe_file_made"] = pipe.exists()
    if pipe.exists():
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"1")
        os.close(fd)
    deadline = time.monotonic() + 30
    while not (out / "dumps" / "pipe_rank_0").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1)
    proc.send_signal(signal.SIGABRT)


def examples(work: Path, env: dict[str, str]) -> dict[str, Any]:
    """The examples' scripts under NCCL (world 1, torchrun): one resumed from a checkpoint."""
    said: dict[str, Any] = {}
    env = {**env, "DDP_BACKEND": "nccl", "PYTHONPATH": str(ROOT / "operator")}
    resumed = {"DDP_RESUME_STEP": "20", "DDP_RESUME_PATH": str(work / "ckpt" / "step-20.pt")}
    runs = {  # (the second resumes from the first's step 20)
        "progress_train": f"{STEPS} --checkpoint-every 10 --checkpoint-dir {work}/ckpt",
        "progress_train_resumed": STEPS,
        "train": "--epochs 1",
    }
    for name, args in runs.items():
        script = ROOT / "examples" / "scripts" / f"{name.removesuffix('_resumed')}.py"
        done = subprocess.run(
            [sys.executable, *TORCHRUN.split(), "29610", str(script), *args.split()],
            env={**env, **(resumed if name.endswith("_resumed") else {})},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=work,
        )
        said[name] = {"rc": done.returncode, "tail": (done.stdout + done.stderr)[-2500:]}
    return said


if __name__ == "__main__":
    main()
