"""act/namespace_observer.py: a namespace that kopf's watch lists (events of type None, as after
its start or a 410) is served, as kopf's own first listing serves it; kopf alone drops it (seen on
the cluster: a test's namespace created just after its operator was ready sat unserved until the
namespace was deleted, docs/development/tests.md)."""

from __future__ import annotations

import asyncio

from kopf._cogs.structs import references
from kopf._core.reactor import observation

from ddp_operator.act import namespace_observer

PATTERNS = ["team-*"]


def listed(name: str, terminating: bool = False) -> dict:
    meta: dict = {"name": name}
    body: dict = {"metadata": meta}
    if terminating:  # as the namespace controller shows one whose content is being deleted
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
        body["status"] = {"conditions": [{"type": "NamespaceDeletionContentFailure"}]}
    return {"type": None, "object": body}


def served_after(processor, *events: dict) -> set:
    async def run() -> set:
        insights = references.Insights()
        for event in events:
            await processor(raw_event=event, namespaces=PATTERNS, insights=insights)
        return set(insights.namespaces)

    return asyncio.run(run())


def test_kopf_alone_drops_a_namespace_its_watch_lists() -> None:
    """What the fix is for: if kopf ever serves it by itself, the fix can go."""
    assert served_after(namespace_observer.KOPF_OWN, listed("team-a")) == set()


def test_the_watch_s_listing_is_served_as_kopf_serves_its_first_listing() -> None:
    events = (listed("team-a"), listed("other"), listed("team-gone", terminating=True))
    first = references.Insights()
    observation.revise_namespaces(
        raw_bodies=[e["object"] for e in events], insights=first, namespaces=PATTERNS
    )
    assert first.namespaces == {"team-a"}
    assert served_after(namespace_observer._take_every_listing, *events) == first.namespaces
    added = {"type": "ADDED", "object": {"metadata": {"name": "team-b"}}}
    assert served_after(namespace_observer._take_every_listing, added) == {"team-b"}
