"""Faults of the second real node for the tests of a lost node (realnode.sh kubelet|link): its
kubelet stopped or its link cut while its containers run on; undone once, by the test or at the
latest when its ``with`` block ends, and the node Ready again before anything goes on.

Those tests, and those that restart real-node-1's kubelet or stop its NetworkPolicy engine, run
beside the node session's others (make test), which may place pods on either real node: ``kept``
first keeps real-node-1 for them alone (a taint only their jobs tolerate, then no other pod left
running there), so that what they do to it reaches no other test's pod."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Literal

from kubernetes.client.exceptions import ApiException

from .cluster import Cluster, wait_for
from .realnode import NODE_1, realnode

KEPT = {"key": "ddp-test/node-1-kept", "operator": "Exists", "effect": "NoSchedule"}
KEPT_TAINT = {"key": KEPT["key"], "effect": KEPT["effect"]}


def tolerating(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with its pods tolerating ``kept``'s taint."""
    spec = job["spec"]["template"].setdefault("spec", {})
    # New lists and maps: a template's may be shared (harness.realnode's ON_REAL_NODE).
    spec["tolerations"] = [*spec.get("tolerations", ()), copy.deepcopy(KEPT)]
    return job


def on_node_1(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with every worker on real-node-1, ``kept`` for it (``tolerating``)."""
    spec = job["spec"]["template"].setdefault("spec", {})
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "kubernetes.io/hostname": NODE_1}
    return tolerating(job)


def _set_taint(cluster: Cluster, on: bool) -> None:
    """KEPT_TAINT on real-node-1 or off, its other taints as they are: a patch that holds only on
    the node as read (its resourceVersion), read again and retried when the node lifecycle
    controller changed the taints meanwhile."""

    def patched() -> bool:
        node = cluster.core.read_node(NODE_1)
        taints = [  # whole, timeAdded too (a NoExecute taint's evictions count from it)
            cluster.api.sanitize_for_serialization(t)
            for t in node.spec.taints or ()
            if t.key != KEPT_TAINT["key"]
        ]
        taints += [KEPT_TAINT] if on else []
        body = {"metadata": {"resourceVersion": node.metadata.resource_version}}
        try:
            cluster.core.patch_node(NODE_1, body | {"spec": {"taints": taints}})
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    wait_for(patched, timeout=60, interval=0.2, what=f"{NODE_1}'s taint {'on' if on else 'off'}")


# Pods whose controller puts them back elsewhere when their node goes (make demo's operator, a
# Deployment's): nothing of a test's, so ``kept`` does not wait for them.
REPLACED = ("ReplicaSet", "DaemonSet", "StatefulSet")
SETTLED_S = 3.0  # no other pod there for this long: none the scheduler placed before the taint


def _others_on_node_1(cluster: Cluster) -> list[str]:
    """Pods not done on real-node-1 that do not tolerate ``kept``'s taint, but for REPLACED's."""
    listed = cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE_1}")
    return [
        f"{p.metadata.namespace}/{p.metadata.name}"
        for p in listed.items
        if p.status.phase not in ("Succeeded", "Failed")
        and not any(t.key == KEPT["key"] for t in p.spec.tolerations or ())
        and not any(o.controller and o.kind in REPLACED for o in p.metadata.owner_references or ())
    ]


def _node_1_to_itself(cluster: Cluster, timeout: float) -> None:
    """Once tainted: no other pod on real-node-1 for SETTLED_S on end (a pod the scheduler had
    placed just before it saw the taint is bound a moment later), or fail naming those left."""
    deadline, since, others = time.monotonic() + timeout, None, []
    while time.monotonic() < deadline:
        others = _others_on_node_1(cluster)
        if others:
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since >= SETTLED_S:
            return
        time.sleep(1)
    raise AssertionError(f"{NODE_1} still runs pods of other tests after {timeout}s: {others}")


@contextmanager
def kept(cluster: Cluster) -> Iterator[None]:
    """real-node-1 for the jobs that tolerate KEPT alone: tainted (no other pod is placed there),
    then waited on until no other test's pod runs there (those placed before end with their tests),
    untainted at the end (a session killed meanwhile leaves the taint: ``kubectl taint node
    real-node-1 ddp-test/node-1-kept:NoSchedule-``, or the next ``kept``, lifts it)."""
    _set_taint(cluster, True)
    try:
        # Under the modules' own timeouts (600 s, setup included), so that this says why.
        _node_1_to_itself(cluster, timeout=300)
        yield
    finally:
        _set_taint(cluster, False)


# Each fault: what makes it, what undoes it (realnode.sh's words, for node 1).
FAULTS = {
    "kubelet": (("kubelet", "stop"), ("kubelet", "start")),
    "link": (("link", "cut"), ("link", "heal")),
}


class NodeFault:
    """real-node-1 lost as ``how`` says ("kubelet": its kubelet stopped; "link": cut off)."""

    def __init__(self, cluster: Cluster, how: Literal["kubelet", "link"]) -> None:
        self.cluster, self.how = cluster, how
        self.done = False

    def __enter__(self) -> NodeFault:
        realnode(*FAULTS[self.how][0], "1")
        return self

    def restore(self) -> None:
        """The node back (once) and Ready, with none of the taints of a lost node left (a pod
        placed meanwhile would avoid it)."""
        if self.done:
            return
        realnode(*FAULTS[self.how][1], "1")
        wait_for(self._back, timeout=180, interval=1, what=f"{NODE_1} Ready and untainted")
        self.done = True

    def _back(self) -> bool:
        node = self.cluster.core.read_node(NODE_1)
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())
        lost = [t for t in node.spec.taints or () if t.key.startswith("node.kubernetes.io/")]
        return ready and not lost

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()
