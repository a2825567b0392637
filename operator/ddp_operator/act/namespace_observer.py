"""Namespaces created while the operator starts are served: a fix of kopf's namespace observer.

kopf (1.45) lists the namespaces once, then starts a watch that lists them again and hands that
second listing to its observer as events of type None, which the observer drops. A namespace
matching ``--namespace`` created between the two lists (a test or a pipeline creating it while
the operator starts, or one created while a watch restarts after a 410) was never served until
the operator restarted: its jobs got no status at all. Taking the second listing in as the
first one is taken closes the gap; like the first, it adds only namespaces that match the
patterns and are not being deleted.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kopf._core.reactor import observation

KOPF_OWN = getattr(observation, "process_discovered_namespace_event", None)  # what it replaces


async def _take_every_listing(
    *, raw_event: Any, namespaces: Collection[Any], insights: Any, **_: Any
) -> None:
    async with insights.revised:
        observation.revise_namespaces(
            raw_events=[raw_event], insights=insights, namespaces=namespaces
        )
        insights.revised.notify_all()


def install() -> None:
    """Replace kopf's processor of namespace events (before ``kopf.run``). Fails loudly if a
    kopf upgrade renamed what it replaces, so that the fix is looked at again."""
    if KOPF_OWN is None:
        raise RuntimeError("kopf changed its namespace observer: review act/namespace_observer.py")
    observation.process_discovered_namespace_event = _take_every_listing
