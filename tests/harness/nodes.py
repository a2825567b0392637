"""Nodes of the local cluster as harness.faults sees them: Ready condition, Lease, taints, and
the marks of a silenced node (see harness.faults for why each is needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from .cluster import Cluster

LEASE_NS = "kube-node-lease"
HOSTNAME = "kubernetes.io/hostname"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
# On a silenced node and on its pods (the pod stages of manifests/stages.yaml skip marked pods);
# also the key of the NoSchedule taint a silenced node gets, and the holder of its Lease.
SILENCED = "ddp-operator.io/test-silenced"


def coordination(cluster: Cluster) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(cluster.api)


def get_node(cluster: Cluster, node: str) -> dict[str, Any]:
    return cluster.api.sanitize_for_serialization(cluster.core.read_node(node))


def ready_condition(node: dict[str, Any]) -> dict[str, Any] | None:
    """The Ready condition of a node (as a dict), or None."""
    conds = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready"), None)


def is_silenced(node: dict[str, Any]) -> bool:
    return SILENCED in (node["metadata"].get("annotations") or {})


def has_unreachable_taint(node: dict[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t["key"] == UNREACHABLE_TAINT and t["effect"] == "NoExecute" for t in taints)


def last_heartbeat(cluster: Cluster, node: str) -> datetime:
    """The later of the node Lease's renewTime and its Ready condition's lastHeartbeatTime."""
    lease = coordination(cluster).read_namespaced_lease(node, LEASE_NS)
    times = [lease.spec.renew_time]
    ready = ready_condition(get_node(cluster, node)) or {}
    if ready.get("lastHeartbeatTime"):
        times.append(datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00")))
    return max(t.astimezone(UTC) for t in times if t is not None)


def take_lease(cluster: Cluster, node: str) -> None:
    """Another holder, unexpired for a day; renewTime as it was. Only kwok reads the duration;
    the node lifecycle controller looks at renewTime alone. A kwok renewal in flight fails: it
    updates with the resourceVersion it read."""
    spec = {"holderIdentity": SILENCED, "leaseDurationSeconds": 86400}
    coordination(cluster).patch_namespaced_lease(node, LEASE_NS, {"spec": spec})


def expire_lease(cluster: Cluster, node: str) -> None:
    """kwok's next try (every renew interval, 5 s) takes an expired Lease back."""
    coordination(cluster).patch_namespaced_lease(
        node, LEASE_NS, {"spec": {"leaseDurationSeconds": 1}}
    )


def mark(cluster: Cluster, node: str, on: bool) -> None:
    """Mark (or unmark) the node and the pods bound to it; taint it NoSchedule (or not)."""
    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if on else None
    patch = {"metadata": {"annotations": {SILENCED: value}}}
    if on:  # no new pod lands there, so every pod there is marked
        _taint(cluster, node, on)
    cluster.core.patch_node(node, patch)
    bound = cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    for pod in bound.items:
        try:
            cluster.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    if not on:
        _taint(cluster, node, on)


def _taint(cluster: Cluster, node: str, on: bool) -> None:
    """Add or remove the NoSchedule taint SILENCED, guarded by resourceVersion (the node
    lifecycle controller changes taints too)."""
    for _ in range(10):
        got = cluster.core.read_node(node)
        taints = [t for t in got.spec.taints or [] if t.key != SILENCED]
        if on:
            taints.append(client.V1Taint(key=SILENCED, effect="NoSchedule"))
        body = {
            "metadata": {"resourceVersion": got.metadata.resource_version},
            "spec": {"taints": cluster.api.sanitize_for_serialization(taints)},
        }
        try:
            cluster.core.patch_node(node, body)
            return
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"could not {'add' if on else 'remove'} taint {SILENCED} on {node}")


# The fake nodes' taints (hack/cluster/manifests/nodes.yaml): a pod that asks for nothing only
# they have lands on the real node. A namespace with these annotations sends its pods to the fake
# nodes (the API server's PodNodeSelector and PodTolerationRestriction, hack/cluster/kwokctl.yaml):
# the tests' namespaces but those of tests marked `node`, and the chaos runs'.
FAKE_NODE_TAINTS = ("ddp-operator.io/fake-node", "nvidia.com/gpu", "huawei.com/Ascend910")
ON_FAKE_NODES: dict[str, str] = {
    "scheduler.alpha.kubernetes.io/node-selector": "type=kwok",
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in FAKE_NODE_TAINTS]
    ),
}


def fake_nodes_namespace(name: str) -> dict[str, Any]:
    """A Namespace whose pods land on the fake nodes (kwok), whatever their spec asks."""
    return {"metadata": {"name": name, "annotations": ON_FAKE_NODES}}
