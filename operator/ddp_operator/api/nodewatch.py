"""The nodes marked broken (``model/node_health``), read for the job loops: the cluster's Nodes
listed at most every ``REFRESH_SECONDS``, once for all jobs; an Event posted on a Node a job
blamed, and, where the operator is told to, the taint ``ddp-operator.io/suspect:NoSchedule`` on
it, never on more than a share of the cluster's nodes. With ``kube``, the operator's I/O."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from ..model import node_health
from .kube import Kube

log = logging.getLogger(__name__)

REFRESH_SECONDS = 15.0
NODES_PATH = "/api/v1/nodes"
SUSPECT = {"key": node_health.SUSPECT_TAINT, "value": "true", "effect": "NoSchedule"}
NOT_TAINTED = "is not tainted"  # in what ``taint`` says when the share forbids it


class NodeHealth:
    """Which nodes are marked broken now (name: why), by ``markers`` (none: no Node is read)."""

    def __init__(
        self, kube: Kube | None, markers: Sequence[node_health.Marker], taint_share: float = 0.0
    ):
        self.kube, self.markers = kube, tuple(markers)
        self.taint_share = taint_share  # the most nodes tainted, as a share of all (0: none)
        self.total = 0  # nodes in the last list
        self.suspects: set[str] = set()  # nodes carrying SUSPECT_TAINT, as last seen
        self._broken: Mapping[str, str] = MappingProxyType({})
        self._read = float("-inf")
        self._lock = asyncio.Lock()
        self._failed = False

    async def broken(self) -> Mapping[str, str]:
        """The nodes marked broken, as last listed (again when older than REFRESH_SECONDS); a
        list that fails (no RBAC to read Nodes) keeps the last one, and is logged once."""
        if self.kube is None or not (self.markers or self.taint_share):
            return self._broken
        if time.monotonic() - self._read < REFRESH_SECONDS:
            return self._broken
        async with self._lock:
            if time.monotonic() - self._read < REFRESH_SECONDS:
                return self._broken
            try:
                nodes, _ = await self.kube.list_objects("list_nodes", NODES_PATH, "")
            except Exception as exc:  # the jobs go on without it
                if not self._failed:
                    log.warning("cannot read the Nodes (broken ones not avoided): %s", exc)
                self._failed = True
            else:
                found, suspects = {}, set()
                for node in nodes:
                    name = (node.get("metadata") or {}).get("name", "")
                    why = node_health.broken(node, self.markers)
                    if why is not None:
                        found[name] = why
                    if _suspect(node):
                        suspects.add(name)
                self._broken = MappingProxyType(found)
                self.total, self.suspects = len(nodes), suspects
                self._failed = False
            self._read = time.monotonic()
        return self._broken

    async def taint(self, node: str) -> str | None:
        """Taint ``node`` ``ddp-operator.io/suspect=true:NoSchedule`` for every workload, if the
        operator is told to and fewer than ``taint_share`` of the nodes carry it; what was done
        (None: nothing asked)."""
        if self.kube is None or self.taint_share <= 0:
            return None
        await self.broken()
        most = int(self.taint_share * self.total)
        if node in self.suspects:
            return f"node {node} is tainted {node_health.SUSPECT_TAINT} already"
        if len(self.suspects) >= most:
            said = (
                f"node {node} {NOT_TAINTED}: {len(self.suspects)} of {self.total} nodes are, "
                f"the most --taint-blamed-nodes {self.taint_share} allows"
            )
            log.warning("%s", said)
            return said
        body = await self.kube.read_node(node)
        if body is None:
            return None
        taints = list((body.get("spec") or {}).get("taints") or ())
        if not _suspect(body):
            taints.append(dict(SUSPECT))
            version = body["metadata"].get("resourceVersion")
            patch = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
            if not await self.kube.patch_node(node, patch):
                return None  # changed meanwhile: the next blame tries again
            log.info("tainted node %s %s:NoSchedule", node, node_health.SUSPECT_TAINT)
        self.suspects.add(node)
        return f"node {node} tainted {node_health.SUSPECT_TAINT}=true:NoSchedule"


def _suspect(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == node_health.SUSPECT_TAINT for t in taints)


NODE_EVENTS_NAMESPACE = "default"  # where Events of cluster-scoped objects go, as kubectl looks


async def post_node_event(kube: Kube, node: str, reason: str, message: str) -> str | None:
    """A Warning Event on Node ``node``, in ``default`` with the node's name as its UID, as the
    kubelet posts its own: ``kubectl describe node`` finds it there. None once posted, else the
    API's words (the job's loop tells the job)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.", "namespace": NODE_EVENTS_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "source": {"component": "ddp-operator"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await kube.create_event(event)
    except Exception as exc:
        log.warning("could not post Event %s on node %s: %s", reason, node, exc)
        return str(exc)
    return None
