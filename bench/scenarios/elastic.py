"""S7, elastic: on the real node, a job of 3 workers (torchrun, gloo, one process each) loses
worker 2's pod (deleted, as a lost node's would be); the time from the deletion to every
process of the next world of 3 past ``init_process_group``: an elastic job (minNodes 2, maxNodes
3) replaces worker 2 alone while the others' agents re-rendezvous, a fixed one restarts its group
(a deleted pod cannot restart in place: the group is recreated). The processes write their own
clock readings to a host folder; the pods run this host's torch (a torch before 2.8 closes an
elastic rendezvous on an agent's SIGTERM: see tests/test_realnode_elastic.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from ddp_operator.model import constants as c

from cluster import log
from contenders.ours import Ours
from scenarios.recovery import ON_REAL_NODE, host_folder, trainer_image

HOST = Path("/tmp/ddp-bench-s7e")
SITE = Path(torch.__file__).parents[1]
SCRIPT = """
import os, socket, time, torch, torch.distributed as dist
out = os.environ["S7_OUT"]
dist.init_process_group("gloo")
world = dist.get_world_size()
with open(f"{out}/init-{socket.gethostname()}-{world}-{time.time()!r}", "w"):
    pass
while not os.path.exists(f"{out}/stop"):
    dist.all_reduce(torch.ones(1))
    time.sleep(0.2)
"""
ELASTIC, GROUP = "ElasticReplace", "GroupRestart"
LAUNCH = ["python3", "-m", "torch.distributed.run", "--no-python", "python3", "-c"]


def job(name: str, ns: str, image: str, elastic: bool) -> dict[str, Any]:
    out = str(HOST / name)
    container = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [*LAUNCH, SCRIPT],
        "env": [{"name": "S7_OUT", "value": out}, {"name": "PYTHONPATH", "value": "/host-site"}],
        "volumeMounts": [
            {"name": "out", "mountPath": out},
            {"name": "site", "mountPath": "/host-site", "readOnly": True},
        ],
    }
    spec = {
        **ON_REAL_NODE,
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [
            {"name": "out", "hostPath": {"path": out, "type": "Directory"}},
            {"name": "site", "hostPath": {"path": str(SITE), "type": "Directory"}},
        ],
    }
    bounds = {"minNodes": 2, "maxNodes": 3} if elastic else {}
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodes": 3,
            "backend": "gloo",
            "backoffLimit": 1,
            **bounds,
            "template": {"spec": spec},
        },
    }


def _inits(out: Path, after: float) -> dict[str, float]:
    """Each host's first process past init in a world of 3 after ``after``."""
    first: dict[str, float] = {}
    for f in out.glob("init-*"):
        host, world, t = f.name.removeprefix("init-").rsplit("-", 2)
        if world == "3" and float(t) > after:
            first[host] = min(float(t), first.get(host, float("inf")))
    return first


def _until(what: str, probe: Any, seconds: float = 180) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := probe():
            return found
        time.sleep(0.2)
    raise RuntimeError(f"S7 elastic: {what} not within {seconds} s")


def one(ours: Ours, ns: str, image: str, elastic: bool, n: int) -> float:
    """One lost worker; seconds from its pod's deletion to the next world of 3 past init."""
    name = f"s7e-{'elastic' if elastic else 'group'}-{n}"
    out = host_folder(HOST / name)
    api = ours.cluster.custom
    api.create_namespaced_custom_object(
        c.GROUP, c.VERSION, ns, c.PLURAL, job(name, ns, image, elastic)
    )
    _until("a world of 3", lambda: len(_inits(out, 0)) == 3)
    time.sleep(1)
    lost = time.time()
    ours.cluster.core.delete_namespaced_pod(f"{name}-worker-2", ns)
    passed = _until("the next world of 3", lambda: len(i := _inits(out, lost)) == 3 and i)
    (out / "stop").touch()

    def ended() -> dict[str, Any] | None:
        obj = api.get_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name)
        return obj if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    status = _until("the job's end", ended)["status"]
    want = (0, 1) if elastic else (1, 0)
    got = (status.get("restarts"), status.get("replacements"))
    if status["phase"] != "Succeeded" or got != want:
        raise RuntimeError(f"S7 elastic {name}: status {json.dumps(status)[:1500]}")
    api.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name)
    return max(passed.values()) - lost


def elastic_recovery(ours: Ours, runs: int) -> dict[str, list[float]]:
    """``runs`` lost workers per kind of job, interleaved; each one's recovery in seconds."""
    image = trainer_image()
    ns = ours.namespace("s7e")
    found: dict[str, list[float]] = {ELASTIC: [], GROUP: []}
    for n in range(runs):
        for kind, times in found.items():
            times.append(one(ours, ns, image, kind == ELASTIC, n))
            log(f"S7 {kind} {n + 1}: {times[-1]:.2f} s from the lost pod to a world of 3 again")
    ours.drop(ns)
    return found
