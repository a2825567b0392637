"""What the job loops read of the Events of workers stalled before their first container (the
decisions are ``kubelet_events``'): one list of a namespace's Warning Events about pods,
shared by every job there that asks within SHARED_SECONDS, and none at all while no worker is
stalled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..api.kube import Kube
from ..decide import kubelet_events
from ..decide.failures import api_message
from ..model.jobspec import JobSpec
from ..model.pod_status import Waiting
from ..model.workers import WorkerPod

SHARED_SECONDS = 1.0  # a list answers every job of its namespace that asks within this


class EventReader:
    """The Warning Events about pods, per namespace, listed when a job loop asks."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._lists: dict[str, tuple[float, asyncio.Task[list[dict[str, Any]]]]] = {}

    async def warnings(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's Warning Events about pods, listed within SHARED_SECONDS."""
        now = time.monotonic()
        for ns, (at, _) in list(self._lists.items()):  # nothing is kept longer than it serves
            if now - at >= SHARED_SECONDS:
                del self._lists[ns]
        if namespace not in self._lists:
            task = asyncio.ensure_future(
                self.kube.list_events(namespace, kubelet_events.FIELD_SELECTOR)
            )
            # Its error is every asker's to handle (explain); none is left unretrieved when
            # an asker was cancelled meanwhile.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._lists[namespace] = (now, task)
        return await asyncio.shield(self._lists[namespace][1])


async def explain(
    reader: EventReader, job: JobSpec, pods: Sequence[WorkerPod], now: datetime
) -> tuple[list[WorkerPod], float | None]:
    """The pods, each of the job's own stalled workers carrying the Events' word on why (or, if
    they cannot be read, that and why, so that the job still says it); and the seconds until
    a pass should look again, if any."""
    own = [p for p in pods if job.uid and p.owner_uid == job.uid]
    stuck, due = kubelet_events.stalled(own, now)
    if not stuck:
        return list(pods), due
    try:
        events = await reader.warnings(job.namespace)
    except Exception as exc:
        said = {
            p.uid: Waiting(
                "",
                "EventsUnreadable",
                f"no container started; the pod's Events could not be read: {api_message(exc)}",
            )
            for p in stuck
            if p.uid
        }
    else:
        said = kubelet_events.latest(events, (p.uid for p in stuck if p.uid))
    again = kubelet_events.RECHECK_SECONDS
    return kubelet_events.merged(pods, said), again if due is None else min(again, due)
