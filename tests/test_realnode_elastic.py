"""Elastic training in real containers on the real node: 3 workers (minNodes 2, maxNodes 3) run
torchrun's c10d rendezvous and a loop of all-reduce steps that logs the world size. Worker 2's
pod is deleted mid-run: it is replaced alone (the job counts a replacement, no group restart;
workers 0 and 1 keep their pods and containers) and the group trains at world 3 again (the
successor usually joins the survivors' next round within its last call); then ``spec.nodes``
goes 3 -> 2 -> 3 live, and the world size follows; the job succeeds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from kubernetes.client import ApiException

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.realnode import kubectl_ddp, trainer_job

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(600)]

# A torch before 2.8 closes the rendezvous for every node when one agent gets SIGTERM
# (pytorch#150916, fixed by pytorch#152525): a deleted pod would end them all. These pods run the
# test runner's own torch, mounted read-only from this host, whatever the image was built with.
SITE = Path(torch.__file__).parents[1]

# Every process: one line per rendezvous round (its world and torchrun's restart count), then
# all-reduce steps that check the sum. Done in a world of 3 once the test has written
# /tmp/finish in worker 0's container (at the end: how fast a successor joins, and so which
# rounds torchrun forms, depends on the machine's load; the script must not end on its own).
TRAIN = r"""
import os, socket, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
world, restarts = dist.get_world_size(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"ROUND host={socket.gethostname()} world={world} restart={restarts}", flush=True)
step = 0
while True:
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    flag = torch.tensor([float(os.path.exists("/tmp/finish"))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    assert t[0].item() == world, (t, world)
    step += 1
    if world == 3 and flag.item() == 1:
        break
    time.sleep(0.3)
print(f"DONE host={socket.gethostname()} world={world} steps={step}", flush=True)
dist.destroy_process_group()
"""
ROUND = re.compile(r"ROUND host=(\S+) world=(\d) restart=(\d+)")


def _pods(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in jobs.workers(cluster, ns, "elastic")}


def _trainer_restarts(pod: dict[str, Any]) -> int:
    statuses = pod["status"].get("containerStatuses") or []
    return next(s["restartCount"] for s in statuses if s["name"] == "trainer")


def _log(cluster: Cluster, ns: str, pod: str) -> str:
    """The log of worker ``pod``'s trainer container; empty before it starts (the client
    returns None, not "", for a container that has written nothing yet)."""
    try:
        return cluster.core.read_namespaced_pod_log(pod, ns, container="trainer") or ""
    except ApiException as exc:  # not created yet, or its container not started
        if exc.status in (400, 404):
            return ""
        raise


def _rounds(cluster: Cluster, ns: str, pod: str) -> list[tuple[int, int]]:
    """The rounds worker ``pod``'s processes joined, as (world, restart count)."""
    return [(int(w), int(r)) for _h, w, r in ROUND.findall(_log(cluster, ns, pod))]


def _scale(cluster: Cluster, ns: str, nodes: int) -> None:
    cluster.custom.patch_namespaced_custom_object(
        "ddp-operator.io", "v1alpha1", ns, "ddpjobs", "elastic", {"spec": {"nodes": nodes}}
    )


def test_a_lost_worker_is_replaced_alone_and_nodes_scale_live(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    try:
        _replace_and_scale(cluster, namespace, images["trainer"])
    except AssertionError:  # what each worker's processes saw, and the job's status
        for name, pod in _pods(cluster, namespace).items():
            print(f"--- {name} ({pod['status'].get('phase')}):", _rounds(cluster, namespace, name))
            print(_log(cluster, namespace, name)[-3000:])
        print("--- status:", jobs.get(cluster, namespace, "elastic").get("status"))
        raise


def _replace_and_scale(cluster: Cluster, namespace: str, image: str) -> None:
    job = trainer_job(
        "elastic",
        namespace,
        image,
        [],
        procsPerNode=1,
        minNodes=2,
        maxNodes=3,
        backoffLimit=0,  # a group restart would fail the job: none may happen
        rdzvConf={"last_call_timeout": "10"},
    )
    job["spec"]["nodes"] = 3
    command = ["python3", "-m", "torch.distributed.run", "--no-python", "python3", "-c", TRAIN]
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0] |= {
        "command": command,
        "env": [
            {"name": "PYTHONPATH", "value": "/host-site"},
            {"name": "LOGLEVEL", "value": "INFO"},
        ],
        "volumeMounts": [{"name": "host-site", "mountPath": "/host-site", "readOnly": True}],
    }
    pod["volumes"] = [{"name": "host-site", "hostPath": {"path": str(SITE), "type": "Directory"}}]
    jobs.apply(cluster, job)
    head = "elastic-worker-0"
    wait_for(lambda: (3, 0) in _rounds(cluster, namespace, head), timeout=180, what="world 3")
    before = _pods(cluster, namespace)

    # Worker 2's pod is deleted: replaced alone; the others re-rendezvous, in their containers.
    seen = len(_rounds(cluster, namespace, head))
    cluster.core.delete_namespaced_pod("elastic-worker-2", namespace)
    wait_for(
        # A new round in a world of 3 (under load a round of 2 may come between). torchrun's
        # restart count tells nothing here: an agent that sees a survivor waiting restarts its
        # processes as a change of members, uncounted, before they fail.
        lambda: any(w == 3 for w, _r in _rounds(cluster, namespace, head)[seen:]),
        timeout=180,
        what="worker 0 back in a world of 3 after the loss",
    )
    status = jobs.get(cluster, namespace, "elastic")["status"]
    assert status["restarts"] == 0 and status["replacements"] == 1, status
    after = _pods(cluster, namespace)
    for name in ("elastic-worker-0", "elastic-worker-1"):
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert _trainer_restarts(after[name]) == 0, after[name]["status"]
    new = after["elastic-worker-2"]
    assert new["metadata"]["uid"] != before["elastic-worker-2"]["metadata"]["uid"]
    replaced = jobs.wait_event(cluster, namespace, "elastic", "WorkerReplaced")
    assert any("elastic-worker-2 is being deleted" in e["message"] for e in replaced), replaced

    # 3 -> 2: the highest worker goes; torchrun trains on at world 2.
    seen = len(_rounds(cluster, namespace, head))
    _scale(cluster, namespace, 2)
    wait_for(
        lambda: any(w == 2 for w, _r in _rounds(cluster, namespace, head)[seen:]),
        timeout=180,
        what="worker 0 in a world of 2",
    )
    wait_for(
        lambda: jobs.get(cluster, namespace, "elastic")["status"].get("worldSize") == 2,
        timeout=60,
        what="status.worldSize 2",
    )
    wait_for(
        lambda: "elastic-worker-2" not in _pods(cluster, namespace),
        timeout=60,
        what="worker 2 gone",
    )
    line = kubectl_ddp(cluster, "status", "elastic", "-n", namespace).splitlines()[0]
    assert "world=2" in line and "replacements=1" in line, line

    # 2 -> 3: a new worker joins the next round; the test then tells the script to end.
    seen = len(_rounds(cluster, namespace, head))
    _scale(cluster, namespace, 3)
    wait_for(
        lambda: any(w == 3 for w, _r in _rounds(cluster, namespace, head)[seen:]),
        timeout=180,
        what="worker 0 in a world of 3 again",
    )
    finish = "open('/tmp/finish', 'w').close()"
    cluster.kubectl("exec", "-n", namespace, head, "-c", "trainer", "--", "python3", "-c", finish)
    done = jobs.wait_phase(cluster, namespace, "elastic", "Succeeded", timeout=240)
    assert done["status"]["restarts"] == 0 and done["status"]["replacements"] == 1
    rounds = _rounds(cluster, namespace, head)
    print("worker 0 rounds (world, restart):", rounds)
    assert rounds[-1][0] == 3, rounds
    for name, pod in _pods(cluster, namespace).items():
        if name != "elastic-worker-2":
            assert pod["metadata"]["uid"] == before[name]["metadata"]["uid"], name
    assert not [e for e in jobs.events(cluster, namespace, "elastic") if "Restart" in e["reason"]]
