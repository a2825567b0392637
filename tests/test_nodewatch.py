"""The nodes marked broken, as the job loops read them (``nodewatch``): listed once for every
loop at most every REFRESH_SECONDS, the last list kept when a list fails; none read without
markers; the Event on a Node a job blamed goes to ``default`` with the node's name as its UID,
where ``kubectl describe node`` finds it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ddp_operator.api import nodewatch
from ddp_operator.model import node_health

XID = {"type": "SysLogsXIDError", "status": "True", "message": "Xid 79"}


class FakeKube:
    def __init__(self) -> None:
        self.lists = 0
        self.fail = False
        self.events: list[dict[str, Any]] = []
        self.nodes = [
            {"metadata": {"name": "gpu-1"}, "status": {"conditions": [XID]}},
            {"metadata": {"name": "gpu-2"}, "status": {"conditions": []}},
        ]

    async def list_objects(self, verb: str, path: str, selector: str):
        assert (verb, path, selector) == ("list_nodes", "/api/v1/nodes", "")
        self.lists += 1
        if self.fail:
            raise RuntimeError("Forbidden")
        return self.nodes, "1"

    async def create_event(self, manifest: dict[str, Any]) -> bool:
        self.events.append(manifest)
        return True


MARKERS = node_health.parse_all(node_health.DEFAULT_MARKERS)


def test_the_nodes_are_listed_once_per_interval_and_a_failed_list_keeps_the_last(monkeypatch):
    kube = FakeKube()
    health = nodewatch.NodeHealth(kube, MARKERS)  # type: ignore[arg-type]

    async def scenario() -> None:
        assert await health.broken() == {"gpu-1": "condition SysLogsXIDError=True: Xid 79"}
        await asyncio.gather(*(health.broken() for _ in range(10)))
        assert kube.lists == 1
        monkeypatch.setattr(nodewatch, "REFRESH_SECONDS", 0.0)
        kube.fail = True
        assert "gpu-1" in await health.broken()
        kube.fail = False
        kube.nodes[0]["status"]["conditions"] = []
        assert await health.broken() == {}

    asyncio.run(scenario())
    assert kube.lists == 3


@pytest.mark.parametrize("markers", [(), None])
def test_without_markers_no_node_is_read(markers):
    kube = FakeKube()
    health = nodewatch.NodeHealth(kube if markers is not None else None, markers or ())  # type: ignore[arg-type]
    assert asyncio.run(health.broken()) == {} and kube.lists == 0


def test_the_event_on_a_node_is_where_kubectl_describe_node_looks():
    kube = FakeKube()
    asyncio.run(nodewatch.post_node_event(kube, "gpu-1", "DDPJobBlamedNode", "DDPJob ns/j ..."))  # type: ignore[arg-type]
    (event,) = kube.events
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1",
                                       "uid": "gpu-1"}  # fmt: skip
    assert event["type"] == "Warning" and event["reason"] == "DDPJobBlamedNode"


class TaintingKube(FakeKube):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.nodes = [
            {"metadata": {"name": f"gpu-{i}", "resourceVersion": "7"}} for i in range(count)
        ]
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def read_node(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes if n["metadata"]["name"] == name), None)

    async def patch_node(self, name: str, patch: dict[str, Any]) -> bool:
        self.patches.append((name, patch))
        node = await self.read_node(name)
        node["spec"] = patch["spec"]  # type: ignore[index]
        return True


def test_a_blamed_node_is_tainted_only_when_asked_and_within_the_share():
    off = TaintingKube(40)
    assert asyncio.run(nodewatch.NodeHealth(off, MARKERS).taint("gpu-1")) is None  # type: ignore[arg-type]
    assert off.patches == []

    kube = TaintingKube(40)
    health = nodewatch.NodeHealth(kube, MARKERS, taint_share=0.05)  # type: ignore[arg-type]

    async def scenario() -> list[str | None]:
        return [await health.taint(n) for n in ("gpu-1", "gpu-1", "gpu-2", "gpu-3")]

    said = asyncio.run(scenario())
    assert said[0] == "node gpu-1 tainted ddp-operator.io/suspect=true:NoSchedule"
    assert "already" in said[1] and said[2].startswith("node gpu-2 tainted")
    assert said[3].startswith("node gpu-3 is not tainted: 2 of 40 nodes are")  # 5% of 40
    assert [n for n, _ in kube.patches] == ["gpu-1", "gpu-2"]
    _, patch = kube.patches[0]
    assert patch == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"taints": [{"key": "ddp-operator.io/suspect", "value": "true",
                             "effect": "NoSchedule"}]},
    }  # fmt: skip
