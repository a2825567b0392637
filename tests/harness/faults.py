"""Faults on the local kwok cluster: a node that stops answering, a control-plane outage, and a
pod held in Terminating. All but the held pod need the local cluster (``cluster.local``).

**A silent node** (``silence_node``, ``revive_node``). kwok plays the kubelet of the nodes
annotated ``kwok.x-k8s.io/node=fake`` (``hack/cluster/kwokctl.yaml``), but a running kwok v0.8.0
lets go of a node only when the Node is deleted: changing that annotation does not silence it
(measured: its Lease was still renewed every 5 s). So ``silence_node`` (harness.nodes):

1. takes the node's Lease in ``kube-node-lease`` over (another holder, unexpired for a day,
   renewTime left as it was): kwok renews only the Leases it holds and plays node stages only
   for them, so the node's Lease and status are no longer renewed;
2. taints the node ``ddp-operator.io/test-silenced:NoSchedule`` and marks it and the pods bound
   to it with the annotation ``ddp-operator.io/test-silenced``: no pod stage plays for a marked
   pod (manifests/stages.yaml). kwok is meant to skip pods on nodes whose Lease it does not
   hold, but it does so only if its node stages happened to start before its pod stages (Go
   map order: after 2 of 9 restarts measured, it drove them all). The taint keeps new pods
   off, so that every pod there is marked (a real unreachable node still gets pods until the
   node lifecycle controller taints it).

A pod deleted there then stays Terminating, as on an unreachable node, across control-plane
restarts too. The node lifecycle controller marks the node Ready=Unknown and taints it
``node.kubernetes.io/unreachable`` (NoExecute) once its Lease has gone
``node-monitor-grace-period`` (20 s, kwokctl.yaml) without renewal. Measured on 2 cores (9
runs): Unknown and tainted 16-22 s after ``silence_node`` (20.5-23 s after the node's last
heartbeat). ``revive_node`` unmarks, untaints, and lets the Lease expire: kwok takes it back at
its next try (within 5 s) and drives the node and its pods again (a pending deletion
completes); it returns, the node Ready, 0.5-5 s later.

**A control-plane outage** (``stop_control_plane``, ``start_control_plane``,
``control_plane_down``): ``hack/cluster/cluster.sh stop|start`` kills every process of the
cluster (SIGKILL, as ``kwokctl stop`` does: etcd, kube-apiserver, controller manager, scheduler
and kwok; etcd's WAL keeps every acknowledged write) and starts them again; etcd's data, the
certificates, the ports and the kubeconfig are kept. Every process restarts: a kwok left
running through an outage renews no Lease until its informers, backing off, catch up (up to
30 s; its nodes went Unknown), and a scheduler left running schedules nothing meanwhile. The
new kwok takes the node Leases over at once (cluster.sh expires them). The real nodes' kubelets,
CoreDNS, kube-proxy and netpol restart too (``realnode.sh resync``): CoreDNS left running
answered a new Service's names NXDOMAIN for 40 s after a 20 s outage, a kubelet started a new pod
56 s late. Measured on 2 cores:
``stop_control_plane`` 0.4-0.8 s, ``start_control_plane`` 11-17 s (``kwokctl start`` ~5 s,
the Leases up to 5 s, then the checks).

**A held pod** (``hold_pod``, ``release_pod``): the finalizer ``FINALIZER_HOLD`` keeps a deleted
pod Terminating (kwok's ``pod-delete`` stage deletes with grace 0 but leaves finalizers alone)
until it is released.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from . import nodes
from .cluster import CLUSTER_SH, Cluster, wait_for
from .nodes import (
    SILENCED,
    UNREACHABLE_TAINT,
    get_node,
    has_unreachable_taint,
    is_silenced,
    last_heartbeat,
    ready_condition,
)

__all__ = [  # with the node helpers tests use
    "FINALIZER_HOLD",
    "SILENCED",
    "UNREACHABLE_TAINT",
    "control_plane_down",
    "get_node",
    "has_unreachable_taint",
    "hold_pod",
    "is_silenced",
    "last_heartbeat",
    "ready_condition",
    "release_pod",
    "revive_node",
    "silence_node",
    "start_control_plane",
    "stop_control_plane",
    "wait_node_ready_status",
]
FINALIZER_HOLD = "ddp-operator.io/test-hold"
NODE_MONITOR_PERIOD = 2.0  # seconds, kube-controller-manager's (hack/cluster/kwokctl.yaml)


def _need_local(cluster: Cluster, what: str) -> None:
    assert cluster.local, (
        f"{what} needs the local kwok cluster (hack/cluster/cluster.sh); this session uses "
        f"{cluster.kubeconfig}"
    )


def silence_node(cluster: Cluster, node: str) -> datetime:
    """Make a node stop answering without deleting it; returns its last heartbeat (UTC)."""
    _need_local(cluster, "silence_node")
    nodes.take_lease(cluster, node)
    nodes.mark(cluster, node, on=True)
    return last_heartbeat(cluster, node)


def revive_node(cluster: Cluster, node: str, timeout: float = 60) -> None:
    """kwok manages a silenced node again; returns once it is Ready."""
    _need_local(cluster, "revive_node")
    nodes.mark(cluster, node, on=False)
    nodes.expire_lease(cluster, node)
    wait_node_ready_status(cluster, node, "True", timeout)


def wait_node_ready_status(
    cluster: Cluster, node: str, status: str, timeout: float
) -> dict[str, Any]:
    """Wait until the node's Ready condition has ``status`` ("True", "False" or "Unknown");
    returns the node as a dict."""
    assert status in ("True", "False", "Unknown"), status

    def probe() -> dict[str, Any] | None:
        got = get_node(cluster, node)
        return got if (ready_condition(got) or {}).get("status") == status else None

    return wait_for(probe, timeout=timeout, interval=0.5, what=f"node {node} Ready={status}")


def _cluster_sh(command: str) -> None:
    done = subprocess.run(
        [str(CLUSTER_SH), command], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"cluster.sh {command} failed:\n{done.stdout}{done.stderr}"


def stop_control_plane(cluster: Cluster) -> None:
    """Stop every process of the local cluster (its state is kept)."""
    _need_local(cluster, "stop_control_plane")
    _cluster_sh("stop")


def start_control_plane(cluster: Cluster, timeout: float = 120) -> None:
    """Start the control plane again; returns once the cluster works, as seen through this
    session's own client and kubeconfig: /readyz answers, kwok has renewed the Lease of every
    node (but the silenced ones) since, they are Ready a node-monitor period later, and a
    canary pod is scheduled, run and deleted."""
    _need_local(cluster, "start_control_plane")
    began = datetime.now(UTC)
    _cluster_sh("start")

    def awake() -> list[dict[str, Any]]:
        items = cluster.api.sanitize_for_serialization(cluster.core.list_node())["items"]
        return [n for n in items if not is_silenced(n)]

    def renewed() -> bool:
        leases = nodes.coordination(cluster).list_namespaced_lease(nodes.LEASE_NS).items
        fresh = {x.metadata.name for x in leases if x.spec.renew_time and x.spec.renew_time > began}
        return all(n["metadata"]["name"] in fresh for n in awake())

    def ready() -> bool:
        return all((ready_condition(n) or {}).get("status") == "True" for n in awake())

    wait_for(renewed, timeout=timeout, interval=0.5, what="every node's Lease renewed")
    time.sleep(NODE_MONITOR_PERIOD + 0.5)  # the node lifecycle controller has seen them
    wait_for(ready, timeout=timeout, interval=0.5, what="every node Ready")
    fake = [n for n in awake() if (n["metadata"].get("annotations") or {}).get(KWOK) == "fake"]
    canary(cluster, [n["metadata"]["name"] for n in fake], timeout)


KWOK = "kwok.x-k8s.io/node"  # the annotation of the nodes kwok runs


def canary(cluster: Cluster, names: list[str], timeout: float = 120) -> None:
    """A pod in ``default``, for one of the fake nodes ``names``: scheduled, Running, deleted,
    gone."""
    name = f"ddp-harness-canary-{uuid.uuid4().hex[:6]}"
    term = {"matchExpressions": [{"key": nodes.HOSTNAME, "operator": "In", "values": names}]}
    required = {"nodeSelectorTerms": [term]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    tolerations = [{"key": k, "operator": "Exists"} for k in nodes.FAKE_NODE_TAINTS]
    spec = {
        "affinity": affinity,
        "tolerations": tolerations,
        "containers": [{"name": "c", "image": "canary"}],
    }
    cluster.core.create_namespaced_pod("default", {"metadata": {"name": name}, "spec": spec})

    def phase() -> str | None:
        found = cluster.core.list_namespaced_pod("default", field_selector=f"metadata.name={name}")
        return found.items[0].status.phase if found.items else None

    wait_for(lambda: phase() == "Running", timeout=timeout, what=f"canary pod {name} Running")
    cluster.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    wait_for(lambda: phase() is None, timeout=timeout, what=f"canary pod {name} gone")


@dataclass
class Outage:
    """A control-plane outage's times (time.monotonic()): stop called, stop done, start
    called, start done (API and nodes Ready)."""

    began: float = 0.0
    stopped: float = 0.0
    restarting: float = 0.0
    started: float = 0.0


@contextlib.contextmanager
def control_plane_down(cluster: Cluster, seconds: float) -> Iterator[Outage]:
    """Stop the control plane, run the body, and start it again ``seconds`` after it stopped
    (or when the body ends, if later); it is started again even if the body raises."""
    outage = Outage(began=time.monotonic())
    stop_control_plane(cluster)
    outage.stopped = time.monotonic()
    try:
        yield outage
    finally:
        time.sleep(max(0.0, outage.stopped + seconds - time.monotonic()))
        outage.restarting = time.monotonic()
        start_control_plane(cluster)
        outage.started = time.monotonic()


def hold_pod(cluster: Cluster, ns: str, name: str) -> None:
    """Add the finalizer FINALIZER_HOLD: deleting the pod then leaves it Terminating. (The API
    server refuses new finalizers on a pod already being deleted: 422.)"""
    # metadata.finalizers merges in a strategic merge patch: other finalizers are kept.
    cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": [FINALIZER_HOLD]}})


def release_pod(cluster: Cluster, ns: str, name: str) -> None:
    """Remove FINALIZER_HOLD (a pod already gone is fine)."""
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER_HOLD]}}
    try:
        cluster.core.patch_namespaced_pod(name, ns, patch)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
