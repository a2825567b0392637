"""The local cluster's real node (hack/cluster/realnode.sh) for tests: its images, pods and jobs
placed on it, and what runs there (real processes, seen through containerd)."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .cluster import ROOT, Cluster, exclusively, wait_for
from jobs import ddpjob

REALNODE_SH = ROOT / "hack" / "cluster" / "realnode.sh"
BUILD_SH = ROOT / "hack" / "cluster" / "build.sh"
IMAGE_SH = ROOT / "hack" / "cluster" / "image.sh"
SOCK = ROOT / ".cluster" / "realnode" / "containerd" / "containerd.sock"
KUBELET_PID = ROOT / ".cluster" / "realnode" / "kubelet.pid"
KUBECTL_DDP = str(Path(sys.executable).parent / "kubectl-ddp")
POD_NET = ipaddress.ip_network("198.18.0.0/15")
CLUSTER_DNS = ("198.18.0.1", 53)  # CoreDNS, on real-node-0's bridge
NODE = "real-node-0"
# The second real node (realnode.sh up 1): its own kubelet and containerd, in a network
# namespace of its own.
NODE_1 = "real-node-1"
SOCKS = {NODE: SOCK, NODE_1: ROOT / ".cluster" / "realnode-1" / "containerd" / "containerd.sock"}
# How a pod (or a DDPJob's template) asks for a real node: their label. They have no taint (the
# fake nodes have), so a pod that asks for nothing lands on one of them too, but in the tests'
# fake-node namespaces (harness.nodes.fake_nodes_namespace). Most tests look at what runs through
# real-node-0's containerd: ON_REAL_NODE asks for that one by name.
ON_REAL_NODES: dict[str, Any] = {"nodeSelector": {"ddp-operator.io/node": "real"}}
ON_REAL_NODE: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": NODE}}


def realnode(*args: str, timeout: float = 1800) -> str:
    """Run realnode.sh; its stdout (what it prints on success)."""
    done = subprocess.run(
        [str(REALNODE_SH), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"realnode.sh {' '.join(args)}:\n{done.stderr[-4000:]}"
    return done.stdout.strip()


def images() -> dict[str, str]:
    """The node up (a no-op when cluster.sh up brought it) and the names of its images: the
    small Python image, the trainer image and the operator image (built, or taken from the cache,
    and imported)."""
    realnode("up")
    return {
        "python": realnode("image"),
        "trainer": realnode("trainer"),
        "operator": realnode("operator"),
    }


# The images of tests/images/: nothing of the project in them (issue 69).
FOREIGN = ("debian-torch", "no-shell", "trixie-torch28")  # as make test builds them (test.sh)


def built(name: str) -> None:
    """Foreign image ``name`` built, or found in the cache (image.sh foreign: no node needed,
    none of its locks held meanwhile)."""
    done = subprocess.run(
        [str(IMAGE_SH), "foreign", name], capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, f"image.sh foreign {name}:\n{done.stderr[-4000:]}"


def foreign(name: str) -> str:
    """The name of the foreign image ``name`` (tests/images/NAME/Dockerfile: nothing of the
    project in it), built or taken from the cache and imported into the node."""
    return realnode("foreign", name)


class ForeignImages(Mapping[str, str]):
    """The foreign images on the real node by folder name, each built (or taken from the cache)
    and imported the first time a test asks for it: a test waits for its own image only. On a
    cold machine make test builds them in the background from its start, one after the other,
    and a test of one built early need not wait for the others. The build holds no lock of the
    node (the other sessions' steps on the node go on meanwhile); the import holds
    ``realnode``'s."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        if name not in FOREIGN:
            raise KeyError(name)
        if name not in self.names:
            built(name)
            with exclusively("realnode"):
                self.names[name] = foreign(name)
        return self.names[name]

    def __iter__(self) -> Iterator[str]:
        return iter(FOREIGN)

    def __len__(self) -> int:
        return len(FOREIGN)


def pod_on_real_node(name: str, image: str, command: list[str], **spec: Any) -> dict:
    """A one-container pod for the real node that runs once."""
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


def for_real_node(job: dict, image: str) -> dict:
    """A DDPJob manifest with its trainer image replaced by ``image`` and its pods on the node.

    A restart waits until the old group is gone: a worker waiting at the rendezvous for a peer
    that crashed is killed 5 s after SIGTERM instead of the default 30 s."""
    spec = job["spec"]["template"]["spec"]
    spec |= {**ON_REAL_NODE, "terminationGracePeriodSeconds": 5}
    for container in spec["containers"]:
        container |= {"image": image, "imagePullPolicy": "IfNotPresent"}
    return job


def trainer_job(name: str, namespace: str, image: str, args: list[str], **spec: Any) -> dict:
    """A gloo DDPJob of 2 workers running ``args`` in the trainer image (through its entrypoint,
    ddp-wait)."""
    template = {"spec": {"containers": [{"name": "trainer", "image": image, "args": args}]}}
    job = ddpjob(name, namespace, nodes=2, backend="gloo", template=template, **spec)
    return for_real_node(job, image)


def shell_job(name: str, namespace: str, image: str, script: str, **spec: Any) -> dict:
    """A ``trainer_job`` whose trainer runs ``script`` with sh, not through the image's
    entrypoint (ddp-wait: a worker other than 0 would wait for worker 0 to listen)."""
    job = trainer_job(name, namespace, image, [], **spec)
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    return job


def wait_pod_done(cluster: Cluster, ns: str, name: str, timeout: float = 180) -> Any:
    """The pod once it Succeeded or Failed."""

    def done() -> Any:
        pod = cluster.core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(done, timeout=timeout, what=f"pod {name} to finish")


def kubectl_ddp(cluster: Cluster, *args: str) -> str:
    """`kubectl ddp ARGS` against the cluster; its output, which must be a success."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([KUBECTL_DDP, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ctr(*args: str, node: str = NODE) -> str:
    """containerd's `ctr` on the node's socket (namespace k8s.io); its output."""
    bindir = subprocess.run(
        [str(BUILD_SH), "real-node"], capture_output=True, text=True, check=True
    ).stdout.strip()
    cmd = [f"{bindir}/ctr", "--address", str(SOCKS[node]), "--namespace", "k8s.io", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout


def touch(cluster: Cluster, ns: str, pod: str, path: str) -> None:
    """Create ``path`` in ``pod``'s trainer (``kubectl exec``): the test's word to a script that
    waits for it. Exit code 137 is taken as said: the script, let go, ended its container before
    the exec's own process had ended, which the container's end kills (CI of 0a29188); any other
    failure raises, and what the script does next shows whether it heard."""
    done = cluster.kubectl("exec", "-n", ns, pod, "-c", "trainer", "--", "touch", path, check=False)
    if done.returncode not in (0, 137):
        raise AssertionError(f"touch {path} in {pod}: exit {done.returncode}: {done.stderr}")


def trainer_status(cluster: Cluster, ns: str, pod: str) -> Any:
    """The status of the pod's trainer container (the statuses come sorted by name)."""
    statuses = cluster.core.read_namespaced_pod(pod, ns).status.container_statuses or []
    return next((s for s in statuses if s.name == "trainer"), None)


def container_pid(cluster: Cluster, ns: str, pod: str) -> int:
    """The host PID of the main process of the pod's trainer container."""
    status = trainer_status(cluster, ns, pod)
    cid = status.container_id.removeprefix("containerd://")
    node = cluster.core.read_namespaced_pod(pod, ns).spec.node_name
    for line in ctr("tasks", "ls", node=node).splitlines()[1:]:
        task, pid, _ = line.split()
        if task == cid:
            return int(pid)
    raise AssertionError(f"no task of container {cid} ({pod})")


def restart_kubelet(node: int = 0) -> None:
    """Stop real-node-``node``'s kubelet (SIGTERM; the pods' containers run on under containerd)
    and start it again (``realnode.sh up`` starts what does not run), as an upgrade or a crash
    of the kubelet alone does."""
    pid_file = KUBELET_PID if node == 0 else ROOT / ".cluster" / f"realnode-{node}" / "kubelet.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout=30, what="the kubelet to exit")
    realnode("up", *([str(node)] if node else []))


def cluster_dns_knows(name: str) -> bool:
    """Whether the cluster's DNS (CoreDNS, asked from the host) answers ``name``'s A record with
    an address: one query, no search list."""
    query = struct.pack(">HHHHHH", 0x2D2D, 0x0100, 1, 0, 0, 0)  # recursion desired, 1 question
    query += b"".join(bytes([len(x)]) + x.encode() for x in name.rstrip(".").split(".")) + b"\0"
    query += struct.pack(">HH", 1, 1)  # A, IN
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(query, CLUSTER_DNS)
        try:
            answer = sock.recv(512)
        except TimeoutError:
            return False
    flags, _, answers = struct.unpack(">HHH", answer[2:8])
    return flags & 0xF == 0 and answers > 0  # NOERROR, with an answer
