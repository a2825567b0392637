"""S7: recovery on the real node. A DDPJob of 2 workers (gloo, one process each, plain
``env://``) whose worker 1 exits 3 in attempt 0, one second after the group formed; the time from
that exit to every process of attempt 1 past ``init_process_group``, by restart strategy:
InPlace (the kubelet restarts the pods' containers) and Recreate (the pods are deleted and created
again); and, with the second real node up, MoveOne: the workers one on each real node, worker 1's
exit saying a CUDA ECC error, so that its node is kept out and its pod alone is recreated on the
other node while worker 0 restarts in place (issue 72). The processes write their own clock
readings to a host folder (the real nodes run on this machine, so one clock serves both attempts
and both nodes, and a deleted pod's record stays)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ddp_operator.model import constants as c

from cluster import ROOT, log
from contenders.ours import Ours

REALNODE_SH = ROOT / "hack" / "cluster" / "realnode.sh"
HOST = Path("/tmp/ddp-bench-s7")
SCRIPT = """
import os, time
from datetime import timedelta
import torch.distributed as dist
out, rank = os.environ["S7_OUT"], os.environ["RANK"]
attempt = os.environ["DDP_ATTEMPT"]
dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
with open(f"{out}/init-{attempt}-{rank}", "w") as f:
    f.write(repr(time.time()))
if attempt == "0" and rank == "1":
    time.sleep(1)
    with open(f"{out}/failed", "w") as f:
        f.write(repr(time.time()))
    if os.environ.get("S7_ECC"):
        print("RuntimeError: CUDA error: uncorrectable ECC error encountered", flush=True)
    os._exit(3)
dist.barrier()
"""
# The first real node by name (the real nodes are untainted; the fake nodes are tainted,
# hack/cluster/manifests/nodes.yaml): each run measures on the same one.
ON_REAL_NODE: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": "real-node-0"}}
MOVE_ONE = "MoveOne"  # S7's name for an in-place job whose failed worker's node is blamed


def across(name: str) -> dict[str, Any]:
    """Placement of MoveOne's workers: the real nodes, one worker on each (a node kept out is
    no domain of the spread, so the moved worker may join the other)."""
    return {
        "nodeSelector": {"ddp-operator.io/node": "real"},
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {c.LABEL_JOB: name}},
            }
        ],
    }


def trainer_image() -> str:
    """The trainer image on the real node (built or taken from the cache, and imported)."""
    done = subprocess.run(
        [str(REALNODE_SH), "trainer"], capture_output=True, text=True, timeout=3600
    )
    if done.returncode:
        raise RuntimeError(f"realnode.sh trainer: {done.stderr[-2000:]}")
    return done.stdout.strip()


def job(name: str, ns: str, image: str, strategy: str) -> dict[str, Any]:
    out = str(HOST / name)
    env = [{"name": "S7_OUT", "value": out}]
    if strategy == MOVE_ONE:
        env.append({"name": "S7_ECC", "value": "1"})
    container = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", SCRIPT],
        "env": env,
        "volumeMounts": [{"name": "out", "mountPath": out}],
    }
    spec = {
        **(across(name) if strategy == MOVE_ONE else ON_REAL_NODE),
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [{"name": "out", "hostPath": {"path": out, "type": "Directory"}}],
    }
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodes": 2,
            "backend": "gloo",
            "backoffLimit": 1,
            # both explicit; MoveOne is an in-place job
            "restartStrategy": c.RESTART_IN_PLACE if strategy == MOVE_ONE else strategy,
            "template": {"spec": spec},
        },
    }


def host_folder(path: Path) -> Path:
    """An empty folder on this host that the pods (any user) write their records to."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o777)
    return path


def one(ours: Ours, ns: str, image: str, strategy: str, n: int) -> float:
    """One failure and recovery; seconds from worker 1's exit to attempt 1 past init."""
    name = f"s7-{strategy.lower()}-{n}"
    out = host_folder(HOST / name)
    body = job(name, ns, image, strategy)
    ours.cluster.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, body)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        obj = ours.cluster.custom.get_namespaced_custom_object(
            c.GROUP, c.VERSION, ns, c.PLURAL, name
        )
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    else:
        raise RuntimeError(f"S7 {name}: not finished in 300 s")
    said = json.dumps(obj["status"])[:1500]
    if phase != "Succeeded" or obj["status"].get("restarts") != 1:
        raise RuntimeError(f"S7 {name}: {phase}, status {said}")
    if strategy == MOVE_ONE and len(obj["status"].get("excludedNodes") or []) != 1:
        raise RuntimeError(f"S7 {name}: no node kept out, status {said}")
    failed = float((out / "failed").read_text())
    passed = [float((out / f"init-1-{r}").read_text()) for r in (0, 1)]
    ours.cluster.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name)
    return max(passed) - failed


def available(ours: Ours, node: str = "real-node-0") -> bool:
    """Whether the cluster has that local real node Ready (S7 needs its kubelet, and this
    host)."""
    try:
        found = ours.cluster.core.read_node(node)
    except Exception:
        return False
    return any(cd.type == "Ready" and cd.status == "True" for cd in found.status.conditions or [])


def recovery(ours: Ours, runs: int) -> dict[str, Any]:
    """S7: ``runs`` failures per strategy, interleaved; each one's recovery in seconds."""
    image = trainer_image()
    ns = ours.namespace("s7")
    found: dict[str, list[float]] = {c.RESTART_IN_PLACE: [], c.RESTART_RECREATE: []}
    if available(ours, "real-node-1"):
        found[MOVE_ONE] = []
    else:
        log("S7 MoveOne left out: no second real node (hack/cluster/realnode.sh up 1)")
    for n in range(runs):
        for strategy, times in found.items():
            times.append(one(ours, ns, image, strategy, n))
            log(f"S7 {strategy} {n + 1}: {times[-1]:.2f} s from the failure to attempt 1 past init")
    ours.drop(ns)
    return found
