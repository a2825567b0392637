"""Faults of the second real node for the tests of a lost node (realnode.sh kubelet|link): its
kubelet stopped or its link cut while its containers run on; undone once, by the test or at the
latest when its ``with`` block ends, and the node Ready again before anything goes on."""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from .cluster import Cluster, wait_for
from .realnode import NODE_1, realnode

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
