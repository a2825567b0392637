"""Network isolation enforced, on a real node (its NetworkPolicy engine, hack/cluster/netpol;
real-node-1, kept for the test's jobs while the node session's other tests run: ``node_1_kept``):
while a 2-worker job trains (gloo, env://), worker 0's master port refuses a pod of another job, a
plain pod of the job's namespace and one of another namespace, and takes its own worker 1; a job
that turns isolation off takes the plain pod; with the engine stopped, new connections of the
job's pods are dropped (fail closed) while the training goes on; the job succeeds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.node_faults import on_node_1
from harness.realnode import pod_on_real_node, realnode, trainer_job, wait_pod_done

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.node,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("node_1_kept"),
]

# Each worker: gloo all-reduce steps until worker 0's container has /tmp/finish.
TRAIN = r"""
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
while True:
    flag = torch.tensor([float(os.path.exists("/tmp/finish"))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() == 1:
        break
    time.sleep(0.2)
print("DONE", flush=True)
dist.destroy_process_group()
"""
# Three connection attempts of 1 s at most each (the pod network is a local bridge: a connection
# it lets through takes milliseconds); CONNECTED at the first that works.
PROBE = r"""
import socket, sys
for _ in range(3):
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        print("CONNECTED")
        break
    except OSError as exc:
        print("BLOCKED", type(exc).__name__)
"""
PORT = 29500
# What the probe says when the engine drops its packets (a port that does not listen would say
# ConnectionRefusedError instead).
DROPPED = "BLOCKED TimeoutError"


def _job(name: str, ns: str, image: str, **spec) -> dict:
    """A 2-worker job whose training idles until the test finishes it (``_finish``): no stall
    detection, which takes 300 s of idle processes for a hang (run 107: this test took 8
    minutes)."""
    spec.setdefault("stallDetection", {"enabled": False})
    job = trainer_job(name, ns, image, [], procsPerNode=1, masterPort=PORT, **spec)
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["python3", "-c", TRAIN]
    return job


def _master_ip(cluster: Cluster, ns: str, job: str, attempt: int = 0) -> str:
    """Worker 0's pod IP (both workers Running, created in ``attempt``) once its master port
    listens: probed from inside worker 0 itself (loopback, which no policy filters), so that a
    refusal seen later is the engine's drop, never a port that does not listen yet."""
    jobs.wait_running(cluster, ns, job, 2, attempt=attempt, timeout=180)
    pod = f"{job}-worker-0"
    wait_for(
        lambda: _exec_probe(cluster, ns, pod, "127.0.0.1") == "CONNECTED",
        timeout=120,
        interval=1,
        what=f"{pod} listening on its master port",
    )
    return cluster.core.read_namespaced_pod(pod, ns).status.pod_ip


def _probe(cluster: Cluster, ns: str, name: str, image: str, ip: str) -> str:
    """What a new pod in ``ns`` gets connecting to ``ip``: the probe's last line."""
    return _probes(cluster, image, (ns, name, ip))[0]


def _probes(cluster: Cluster, image: str, *probes: tuple[str, str, str]) -> list[str]:
    """``_probe`` for each (namespace, pod name, IP), the pods running side by side."""
    for ns, name, ip in probes:
        pod = pod_on_real_node(name, image, ["python3", "-c", PROBE, ip, str(PORT)])
        cluster.core.create_namespaced_pod(ns, pod)
    lines = []
    for ns, name, _ in probes:
        wait_pod_done(cluster, ns, name)
        lines.append(cluster.core.read_namespaced_pod_log(name, ns).strip().splitlines()[-1])
    return lines


def _exec_probe(cluster: Cluster, ns: str, pod: str, ip: str) -> str:
    """The same from inside a worker's trainer container."""
    done = cluster.kubectl(
        "exec", "-n", ns, pod, "-c", "trainer", "--", "python3", "-c", PROBE, ip, str(PORT)
    )
    return done.stdout.strip().splitlines()[-1]


def _finish(cluster: Cluster, ns: str, job: str) -> None:
    finish = "open('/tmp/finish', 'w').close()"
    pod = f"{job}-worker-0"
    cluster.kubectl("exec", "-n", ns, pod, "-c", "trainer", "--", "python3", "-c", finish)


@pytest.fixture
def elsewhere(cluster: Cluster) -> Iterator[str]:
    """A second namespace, for a stranger's pod."""
    name = f"ddpt-other-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: cluster.core.list_namespaced_service_account(name).items, what="its SA")
    yield name
    cluster.core.delete_namespace(name, propagation_policy="Background")


def test_only_the_jobs_own_pods_reach_its_master_port(
    cluster: Cluster, namespace: str, elsewhere: str, operator, images: dict[str, str]
) -> None:
    py, trainer = images["python"], images["trainer"]
    jobs.apply(cluster, on_node_1(_job("iso", namespace, trainer)))
    jobs.apply(cluster, on_node_1(_job("open", namespace, trainer, network={"isolation": False})))
    ip = _master_ip(cluster, namespace, "iso")
    open_ip = _master_ip(cluster, namespace, "open")
    # A pod of another job (a worker of "open"), a plain pod here, one elsewhere: refused.
    assert _exec_probe(cluster, namespace, "open-worker-1", ip) == DROPPED
    plain, stranger = _probes(cluster, py, (namespace, "plain", ip), (elsewhere, "stranger", ip))
    assert plain == stranger == DROPPED, (plain, stranger)
    # The job's own worker 1 connects (a new connection besides its training ones).
    assert _exec_probe(cluster, namespace, "iso-worker-1", ip) == "CONNECTED"
    # The job without isolation takes the plain pod (so the refusals above can fail).
    assert _probe(cluster, namespace, "plain-open", py, open_ip) == "CONNECTED"

    # The engine stopped: new connections of the job's pods are dropped, even its own worker's
    # (fail closed); the training's connections go on; back once it runs again.
    realnode("netpol", "stop", "1")
    try:
        assert _exec_probe(cluster, namespace, "iso-worker-1", ip) == DROPPED
        assert _probe(cluster, namespace, "plain-open-2", py, open_ip) == "CONNECTED"
    finally:
        realnode("netpol", "start", "1")
    assert _exec_probe(cluster, namespace, "iso-worker-1", ip) == "CONNECTED"
    for job in ("iso", "open"):
        _finish(cluster, namespace, job)
        done = jobs.wait_phase(cluster, namespace, job, "Succeeded", timeout=120)
        assert done["status"]["restarts"] == 0, done["status"]
