"""Real containers on the real node (hack/cluster/realnode.sh): a kubelet, containerd, runc, the
CNI bridge in 198.18.0.0/15 and CoreDNS, beside the kwok nodes of the local cluster.

The images are built here without Docker (hack/cluster/image.sh: the trainer image from
trainer_image/Dockerfile) and imported into the node's containerd. The last test takes the node
down and checks that nothing of it is left on the machine.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness import jobs
from harness.cluster import ROOT, Cluster, wait_for
from jobs import ddpjob

# The first test also brings the node up: on a cold machine that builds containerd, the kubelet
# and CoreDNS, the trainer image (torch fetched from PyPI) and imports it (~20 min, measured by
# pieces); later runs only import the cached image (~2.5 min).
pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]

REALNODE_SH = ROOT / "hack" / "cluster" / "realnode.sh"
KUBECTL_DDP = str(Path(sys.executable).parent / "kubectl-ddp")
POD_NET = ipaddress.ip_network("198.18.0.0/15")
NODE = "real-node-0"
ON_REAL_NODE: dict[str, Any] = {
    "nodeSelector": {"ddp-operator.io/node": "real"},
    "tolerations": [
        {"key": "ddp-operator.io/real-node", "operator": "Exists", "effect": "NoSchedule"}
    ],
}


def realnode(*args: str, timeout: float = 1800) -> str:
    """Run realnode.sh; its stdout (what it prints on success)."""
    done = subprocess.run(
        [str(REALNODE_SH), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"realnode.sh {' '.join(args)}:\n{done.stderr[-4000:]}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def images(cluster: Cluster) -> dict[str, str]:
    """The real node up, with the small Python test image and the trainer image imported."""
    if not cluster.local:
        pytest.skip("the real node joins the local cluster only (hack/cluster/realnode.sh)")
    realnode("up")
    return {"python": realnode("image"), "trainer": realnode("trainer")}


def pod_on_real_node(name: str, image: str, command: list[str], **spec: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            **ON_REAL_NODE,
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}
            ],
            **spec,
        },
    }


def wait_pod_done(cluster: Cluster, ns: str, name: str, timeout: float = 180) -> Any:
    def done() -> Any:
        pod = cluster.core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(done, timeout=timeout, what=f"pod {name} to finish")


def test_a_pod_runs_in_a_real_container(
    cluster: Cluster, namespace: str, images: dict[str, str]
) -> None:
    """A real process runs, its output is the pod's log, its address is on the pod network."""
    cmd = ["python3", "-c", "import socket, sys; print(socket.gethostname(), sys.version_info[:2])"]
    cluster.core.create_namespaced_pod(namespace, pod_on_real_node("hello", images["python"], cmd))
    pod = wait_pod_done(cluster, namespace, "hello")
    assert pod.status.phase == "Succeeded" and pod.spec.node_name == NODE
    assert ipaddress.ip_address(pod.status.pod_ip) in POD_NET
    log = cluster.core.read_namespaced_pod_log("hello", namespace)
    assert log.strip() == "hello (3, 11)"


def test_a_worker_name_resolves_through_cluster_dns(
    cluster: Cluster, namespace: str, images: dict[str, str]
) -> None:
    """<hostname>.<headless service>.<ns>.svc.cluster.local resolves to the pod's address."""
    cluster.core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "sub"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"app": "target"},
            },
        },
    )
    sleeper = pod_on_real_node(
        "target", images["python"], ["python3", "-c", "import time; time.sleep(600)"]
    )
    sleeper["spec"] |= {"hostname": "target", "subdomain": "sub"}
    cluster.core.create_namespaced_pod(namespace, sleeper)
    ip = wait_for(
        lambda: cluster.core.read_namespaced_pod("target", namespace).status.pod_ip,
        timeout=120,
        what="the target pod's address",
    )
    name = f"target.sub.{namespace}.svc.cluster.local"
    resolve = (
        "import socket, sys, time\n"
        "for _ in range(60):\n"
        "    try:\n"
        "        print(socket.gethostbyname(sys.argv[1])); break\n"
        "    except OSError as e:\n"
        "        err = e; time.sleep(1)\n"
        "else:\n"
        "    sys.exit(f'{sys.argv[1]}: {err}')\n"
    )
    client = pod_on_real_node("client", images["python"], ["python3", "-c", resolve, name])
    cluster.core.create_namespaced_pod(namespace, client)
    pod = wait_pod_done(cluster, namespace, "client")
    log = cluster.core.read_namespaced_pod_log("client", namespace).strip()
    assert pod.status.phase == "Succeeded", log
    assert log.splitlines()[-1] == ip


def trainer_job(name: str, namespace: str, image: str, args: list[str], **spec: Any) -> dict:
    template = {
        "spec": {
            **ON_REAL_NODE,
            # A restart waits until the old group is gone: worker 0, waiting at the rendezvous
            # for a peer that crashed, is killed 5 s after SIGTERM instead of the default 30 s.
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": args,
                }
            ],
        }
    }
    return ddpjob(name, namespace, nodes=2, backend="gloo", template=template, **spec)


def test_torchrun_across_two_real_pods(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """2 pods x 2 torchrun processes find worker 0 by its DNS name and all-reduce over gloo;
    `kubectl ddp logs` shows every rank, `kubectl ddp status` the real exit codes."""
    job = trainer_job(
        "ddp",
        namespace,
        images["trainer"],
        ["torchrun", "examples/scripts/allreduce.py"],
        procsPerNode=2,
        backoffLimit=0,
    )
    jobs.apply(cluster, job)
    jobs.wait_phase(cluster, namespace, "ddp", "Succeeded", timeout=300)
    logs = kubectl_ddp(cluster, "logs", "ddp", "-n", namespace)
    for rank in range(4):
        assert f"ALLREDUCE ok rank={rank} world=4 sum=10" in logs, logs
    status = kubectl_ddp(cluster, "status", "ddp", "-n", namespace)
    assert "Succeeded" in status and NODE in status, status


def kubectl_ddp(cluster: Cluster, *args: str) -> str:
    """`kubectl ddp ARGS` against the cluster; its output, which must be a success."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([KUBECTL_DDP, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_real_crash_restarts_the_group_which_then_succeeds(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """Worker 1 exits 3 in attempt 0 (a real process's exit code, as the kubelet reports it):
    the group restarts and attempt 1 succeeds."""
    script = (
        'if [ "$DDP_ATTEMPT" = 0 ] && [ "$NODE_RANK" = 1 ]; then echo crash; exit 3; fi; '
        "exec torchrun examples/scripts/allreduce.py"
    )
    job = trainer_job("crash", namespace, images["trainer"], ["sh", "-c", script], backoffLimit=2)
    jobs.apply(cluster, job)
    done = jobs.wait_phase(cluster, namespace, "crash", "Succeeded", timeout=300)
    assert done["status"]["restarts"] == 1
    failed = jobs.wait_event(cluster, namespace, "crash", "WorkerFailed")
    assert any("crash-worker-1 exited with code 3" in e["message"] for e in failed), failed


def test_dev_shm_is_memory_backed_and_of_the_requested_size(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """`shmSize` gives each worker a tmpfs /dev/shm of that size (DataLoader workers and gloo
    need more than a container runtime's default 64 MiB)."""
    show = "grep ' /dev/shm ' /proc/mounts; df -k /dev/shm | tail -n 1"
    job = trainer_job("shm", namespace, images["trainer"], ["sh", "-c", show], shmSize="256Mi")
    job["spec"]["nodes"] = 1
    jobs.apply(cluster, job)
    jobs.wait_phase(cluster, namespace, "shm", "Succeeded", timeout=180)
    log = cluster.core.read_namespaced_pod_log("shm-worker-0", namespace)
    mount, usage = [line.split() for line in log.splitlines() if line.startswith("tmpfs ")]
    assert mount[1:3] == ["/dev/shm", "tmpfs"] and "size=262144k" in mount[3], log
    assert usage[1] == "262144" and usage[5] == "/dev/shm", log  # 1K-blocks: 256 MiB


def test_realnode_down_leaves_nothing(cluster: Cluster, images: dict[str, str]) -> None:
    """No process, mount, network namespace or bridge of the node is left behind."""
    realnode("down")
    programs = {"containerd", "containerd-shim-runc-v2", "kubelet", "coredns", "pause", "runc"}
    left = []
    for exe in Path("/proc").glob("[0-9]*/exe"):
        try:
            target = exe.readlink()
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if target.name in programs:
            left.append(f"{exe.parent.name}: {target}")
    assert not left, left
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(ROOT / ".cluster" / "realnode") not in mounts
    assert "/run/netns" not in mounts and "/run/containerd" not in mounts
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert " ddp0:" not in links and "veth" not in links
    assert not (ROOT / ".cluster" / "realnode").exists()
    nodes = [n.metadata.name for n in cluster.core.list_node().items]
    assert NODE not in nodes
