"""A real node lost while its pods run on (issue 71): real-node-1's kubelet stopped, or its link
cut, with a worker of each job there. The node goes Unknown, its pods are evicted once their
toleration of the unreachable taint runs out (30 s, the operator's), the operator force-deletes
them (no kubelet is left to confirm) and the group goes on at its next attempt on real-node-0.

The old attempt's process on the lost node (the zombie) runs on all the while: it tries the new
attempt's master port and reports progress with a checkpoint of its own. The fence: the job's
NetworkPolicy admits only pods the API server lists as the job's, so the zombie's connections
are dropped; the operator takes reports only from the job's live pods of its current attempt,
so the zombie's are refused and its checkpoint never reaches the job; when the node returns, its
kubelet kills what no pod owns any more. A job without network isolation shows what the fence
keeps out: its zombie reaches the new master port.

They run beside the node session's other tests (make test), with real-node-1 kept for their jobs
alone meanwhile (``node_1_kept``: no other test's pod is lost with it); the tests that need
real-node-1 as it is run in the same worker, after them (harness/schedule.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from test_realnode_netpol import DROPPED, _finish, _master_ip
from test_realnode_two_nodes import across, nodes_of

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.node_faults import NodeFault, tolerating
from harness.realnode import NODE, NODE_1, ctr, trainer_job
from harness.reporting import Reporting

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.node,
    pytest.mark.timeout(900),
    pytest.mark.usefixtures("node_1_kept"),
]

PORT = 29500
ZOMBIE_CHECKPOINT = "/ckpt/zombie"
# Each worker (one process, env://): gloo all-reduces until worker 0 has /tmp/finish. The worker
# on the lost node reports progress with a checkpoint every 25 steps while its attempt is the
# job's; once its peers are gone (its collective fails) it is the zombie: each second it
# resolves the master's name anew, opens a connection to its port and reports a checkpoint of
# its own. Every line goes to stdout and to /out (a host directory: the lost node's logs may go
# with its pods).
SCRIPT = r"""
import datetime, json, os, socket, sys, time, urllib.error, urllib.request
import torch, torch.distributed as dist

attempt = int(os.environ["DDP_ATTEMPT"])
lost = os.environ["NODE_NAME"] == os.environ["LOST_NODE"]
out = open(f"/out/{os.environ['HOSTNAME']}-{attempt}.log", "a", buffering=1)


def say(*words):
    line = " ".join(map(str, words))
    print(line, flush=True)
    out.write(line + "\n")


def report(step, path):
    token = open(os.environ["DDP_PROGRESS_TOKEN"]).read().strip()
    body = {"step": step, "total": 10**6, "attempt": attempt,
            "checkpoint": {"step": step, "path": path}}
    request = urllib.request.Request(
        os.environ["DDP_PROGRESS_URL"], json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer " + token}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return type(exc).__name__


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
say("TRAINING", attempt)
step = 0
try:
    while True:
        flag = torch.tensor([float(os.path.exists("/tmp/finish"))])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() == 1:
            break
        step += 1
        if lost and step % 25 == 0:
            say("REPORT", report(step, f"/ckpt/attempt-{attempt}"))
        time.sleep(0.2)
except Exception as exc:
    if not lost:
        raise
    say("ZOMBIE", type(exc).__name__)
    while True:
        ip = "-"
        try:
            ip = socket.gethostbyname(os.environ["MASTER_ADDR"])
            socket.create_connection((ip, int(os.environ["MASTER_PORT"])), timeout=1).close()
            said = "CONNECTED"
        except OSError as err:
            said = "BLOCKED " + type(err).__name__
        say("ZOMBIE probe", ip, said)
        say("ZOMBIE report", report(999999, "ZOMBIE_CHECKPOINT"))
        time.sleep(1)
print("DONE", flush=True)
dist.destroy_process_group()
""".replace("ZOMBIE_CHECKPOINT", ZOMBIE_CHECKPOINT)
PROBE = re.compile(r"^ZOMBIE probe (\S+) (.+)$", re.M)
CURRENT_REPORT = re.compile(r"^REPORT (\S+)$", re.M)
ZOMBIE_REPORT = re.compile(r"^ZOMBIE report (\S+)$", re.M)


def lost_node_job(name: str, ns: str, image: str, out: Path, **spec: Any) -> dict[str, Any]:
    """A 2-worker job of SCRIPT, one worker on each real node (``across``), real-node-1 kept for
    it (``tolerating``); /out is ``out``."""
    job = trainer_job(name, ns, image, [], procsPerNode=1, masterPort=PORT, backoffLimit=6, **spec)
    pod = job["spec"]["template"]["spec"]
    trainer = pod["containers"][0]
    trainer["command"] = ["python3", "-c", SCRIPT]
    trainer["env"] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "LOST_NODE", "value": NODE_1},
    ]
    trainer["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
    pod["volumes"] = [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]
    return tolerating(across(job))


def out_dir(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    return out


class Placed:
    """A job's worker on the lost node as attempt 0 placed it (its pod and trainer container),
    once it trains."""

    def __init__(self, cluster: Cluster, ns: str, job: str, out: Path) -> None:
        running = jobs.wait_running(cluster, ns, job, 2, timeout=240)
        nodes = sorted(p["spec"]["nodeName"] for p in running)
        assert nodes == [NODE, NODE_1], nodes
        pod = next(p for p in running if p["spec"]["nodeName"] == NODE_1)
        self.pod = pod["metadata"]["name"]
        trainer = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "trainer")
        self.container = trainer["containerID"].removeprefix("containerd://")
        self.out = out
        wait_for(lambda: "TRAINING 0" in self.log(), timeout=120, what=f"{self.pod} training")

    def log(self) -> str:
        """What its attempt-0 process said (in /out)."""
        path = self.out / f"{self.pod}-0.log"
        return path.read_text() if path.exists() else ""

    def running(self) -> bool:
        """Whether its container's task still runs on the lost node (containerd's view)."""
        return any(
            line.split()[0] == self.container and line.split()[-1] == "RUNNING"
            for line in ctr("tasks", "ls", node=NODE_1).splitlines()[1:]
        )


def moved(cluster: Cluster, ns: str, job: str) -> bool:
    """Both workers live on real-node-0 and Running, at an attempt after the first."""
    live = [w for w in jobs.workers(cluster, ns, job) if not w["metadata"].get("deletionTimestamp")]
    return (
        len(live) == 2
        and [w["spec"].get("nodeName") for w in live] == [NODE, NODE]
        and all(w["status"].get("phase") == "Running" for w in live)
        and all(jobs.attempt_of(w) > 0 for w in live)
    )


def reports(log: str) -> tuple[list[str], list[str]]:
    """The answers to its reports: while its attempt was the job's, and as the zombie."""
    return CURRENT_REPORT.findall(log), ZOMBIE_REPORT.findall(log)


def taken(answers: list[str]) -> bool:
    """Whether the operator took one of these reports (an HTTP status 2xx)."""
    return any(a.startswith("2") for a in answers)


def probes_of(log: str, ip: str) -> list[str]:
    """What the zombie's connections to ``ip`` (the new master's address) met."""
    return [said for to, said in PROBE.findall(log) if to == ip]


def test_a_node_whose_kubelet_stops_loses_its_workers_to_the_other_node_and_its_zombies_are_fenced_off(  # noqa: E501
    cluster: Cluster, reporting: Reporting, images: dict[str, str], tmp_path: Path
) -> None:
    """real-node-1's kubelet stops, its containers run on. Both jobs go on at attempt 1 on
    real-node-0; the zombie of the isolated job meets only drops at the new master port, the
    zombie of the job without isolation connects (the fence is what keeps the first out); both
    zombies' reports are refused and neither checkpoint reaches its job, where their reports
    went in before; once the kubelet is back, it kills both zombies."""
    namespace = reporting.ns
    out = out_dir(tmp_path)
    trainer = images["trainer"]
    jobs.apply(cluster, lost_node_job("iso", namespace, trainer, out))
    jobs.apply(
        cluster, lost_node_job("open", namespace, trainer, out, network={"isolation": False})
    )
    placed = {name: Placed(cluster, namespace, name, out) for name in ("iso", "open")}
    for p in placed.values():  # the control: the worker's reports go in while it is current
        wait_for(lambda p=p: taken(reports(p.log())[0]), timeout=120, what="a report taken")

    t0 = time.monotonic()
    with NodeFault(cluster, "kubelet") as fault:
        for name in placed:
            wait_for(
                lambda n=name: moved(cluster, namespace, n),
                timeout=300,
                interval=1,
                what=f"{name} going on at its next attempt on {NODE}",
            )
        print(f"lost node: both jobs running again on {NODE} {time.monotonic() - t0:.0f}s after")
        # Each new master once it listens (the probes before met a port not open yet), then
        # three more tries of each zombie.
        attempts = {n: jobs.attempt_of(jobs.workers(cluster, namespace, n)[0]) for n in placed}
        masters = {n: _master_ip(cluster, namespace, n, attempts[n]) for n in placed}
        before = {n: len(probes_of(p.log(), masters[n])) for n, p in placed.items()}
        for name, p in placed.items():
            wait_for(
                lambda p=p, n=name: len(probes_of(p.log(), masters[n])) >= before[n] + 3,
                timeout=120,
                interval=1,
                what=f"{name}'s zombie trying the new attempt",
            )
            assert p.running(), f"{name}'s zombie is no longer running: nothing was fenced"
        iso = probes_of(placed["iso"].log(), masters["iso"])[before["iso"] :]
        assert set(iso) == {DROPPED}, placed["iso"].log()
        open_ = probes_of(placed["open"].log(), masters["open"])[before["open"] :]
        assert "CONNECTED" in open_, placed["open"].log()
        for name, p in placed.items():
            zombie = reports(p.log())[1]
            assert len(zombie) >= 3 and set(zombie) == {"403"}, (name, zombie)
        fault.restore()
        for name, p in placed.items():
            wait_for(
                lambda p=p: not p.running(),
                timeout=120,
                interval=1,
                what=f"{name}'s zombie killed once the kubelet is back",
            )

    for name in placed:
        said = [e["message"] for e in jobs.events(cluster, namespace, name)]
        assert any(f"was lost with its node {NODE_1}" in m for m in said), said
        _finish(cluster, namespace, name)
        done = jobs.wait_phase(cluster, namespace, name, "Succeeded", timeout=120)
        status = done["status"]
        assert status["restarts"] >= 1, status
        assert status["checkpoint"]["path"] == "/ckpt/attempt-0", status["checkpoint"]
        assert nodes_of(cluster, namespace, name) == [NODE, NODE]


def test_a_node_cut_off_loses_its_worker_to_the_other_node_and_its_zombie_dies_when_it_returns(
    cluster: Cluster, reporting: Reporting, images: dict[str, str], tmp_path: Path
) -> None:
    """real-node-1's link is cut: nothing passes either way and its containers run on. The job
    goes on at a later attempt on real-node-0; the zombie still runs on the cut-off node, and
    what it tries reaches nothing, until the link is back, when its kubelet, told its pod is gone,
    kills it; what it tried in between took no part in the new attempt."""
    namespace = reporting.ns
    out = out_dir(tmp_path)
    jobs.apply(cluster, lost_node_job("cut", namespace, images["trainer"], out))
    placed = Placed(cluster, namespace, "cut", out)
    t0 = time.monotonic()
    with NodeFault(cluster, "link") as fault:
        wait_for(
            lambda: moved(cluster, namespace, "cut"),
            timeout=300,
            interval=1,
            what=f"the job going on at its next attempt on {NODE}",
        )
        print(f"cut node: the job running again on {NODE} {time.monotonic() - t0:.0f}s after")
        master = cluster.core.read_namespaced_pod("cut-worker-0", namespace).status.pod_ip
        # Its collective timed out (60 s): the zombie tries, and meets nothing while cut off.
        wait_for(
            lambda: len(PROBE.findall(placed.log())) >= 2,
            timeout=120,
            interval=1,
            what="the zombie trying while its node is cut off",
        )
        assert placed.running(), "the zombie is no longer running on the cut-off node"
        log = placed.log()
        assert all(said.startswith("BLOCKED") for _, said in PROBE.findall(log)), log
        assert not any(z.isdigit() for z in reports(log)[1]), log  # no answer at all
        fault.restore()
        wait_for(
            lambda: not placed.running(),
            timeout=120,
            interval=1,
            what="the zombie killed once its node is back",
        )
    # What it tried between the heal and its end (often nothing: the kubelet is quick) was
    # refused too.
    log = placed.log()
    assert "CONNECTED" not in probes_of(log, master), log
    assert all(z == "403" for z in reports(log)[1] if z.isdigit()), log
    said = [e["message"] for e in jobs.events(cluster, namespace, "cut")]
    assert any(f"was lost with its node {NODE_1}" in m for m in said), said
    _finish(cluster, namespace, "cut")
    done = jobs.wait_phase(cluster, namespace, "cut", "Succeeded", timeout=120)
    assert done["status"]["restarts"] >= 1, done["status"]
    assert nodes_of(cluster, namespace, "cut") == [NODE, NODE]
