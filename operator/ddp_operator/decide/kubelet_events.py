"""The kubelet's word on workers stuck before their first container: a pod bound to its node
whose sandbox cannot be created (``FailedCreatePodSandBox``) or whose volumes cannot be mounted
(``FailedMount``: a missing ConfigMap or Secret; ``FailedAttachVolume``) shows only
``ContainerCreating`` or ``PodInitializing`` in its status: the cause is in the Warning Events
posted on the pod. Pure: which workers to ask about, and the Events' latest word for each.

The worker then carries that word as its ``not_starting`` (``startup`` reports it as it does a
container's waiting reason); it goes once the pod starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..model.pod_status import Waiting
from ..model.workers import WorkerPod
from .conditions import parse_time

# How long a worker may be bound to its node without a container started before its Events
# are read (a sandbox takes about a second): workers that start at once cost no request.
STALLED_AFTER = timedelta(seconds=2)
# While some worker stays stalled, its Events are read again this often.
RECHECK_SECONDS = 5.0
# The Events asked for: Warnings about pods but the schedulers' (a bound pod has left those
# behind, ``startup`` reports its own, and a pending gang's would fill the page); the API server
# filters, a namespace at a time.
FIELD_SELECTOR = "involvedObject.kind=Pod,type=Warning,reason!=FailedScheduling"
# The kubelet's and the volume controllers' reasons for a pod that cannot get to its first
# container. Other Warnings (DNSConfigForming, NodeNotReady...) do not hold it there.
BEFORE_FIRST_CONTAINER = frozenset(
    {
        "FailedCreatePodSandBox",
        "FailedCreatePodContainer",
        "FailedPodSandBoxStatus",
        "NetworkNotReady",
        "FailedMount",
        "FailedMapVolume",
        "FailedAttachVolume",
    }
)
EPOCH = datetime.min.replace(tzinfo=UTC)


def stalled(pods: Iterable[WorkerPod], now: datetime) -> tuple[list[WorkerPod], float | None]:
    """The workers bound to a node for STALLED_AFTER or longer with no container (init
    containers too) that runs or has run, nor a container's waiting reason to show; and seconds
    until the next one would be, if any."""
    found, due = [], None
    for pod in pods:
        since = parse_time(pod.scheduled)
        # past (or not at) the stage before the first container, or already explained:
        past = pod.deleting or pod.phase != "Pending" or pod.not_starting or pod.container_ran
        if past or since is None:
            continue
        left = (since + STALLED_AFTER - now).total_seconds()
        if left <= 0:
            found.append(pod)
        else:
            due = left if due is None else min(due, left)
    return found, due


def _when(event: Mapping[str, Any]) -> datetime:
    """The event's latest occurrence (EPOCH if it says none)."""
    series = event.get("series") or {}
    stamps = (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    )
    return max((t for s in stamps if (t := parse_time(str(s) if s else None))), default=EPOCH)


def latest(events: Iterable[Mapping[str, Any]], uids: Iterable[str]) -> dict[str, Waiting]:
    """For each pod UID of ``uids``, its latest Warning Event of a reason that holds a pod before
    its first container, as a Waiting with no container: the pod is what waits."""
    wanted = set(uids)
    best: dict[str, tuple[datetime, Mapping[str, Any]]] = {}
    for event in events:
        uid = (event.get("involvedObject") or {}).get("uid")
        if uid not in wanted or event.get("reason") not in BEFORE_FIRST_CONTAINER:
            continue
        when = _when(event)
        if uid not in best or when >= best[uid][0]:
            best[uid] = (when, event)
    return {
        uid: Waiting("", str(event.get("reason") or "Warning"), str(event.get("message") or ""))
        for uid, (_, event) in best.items()
    }


def merged(pods: Sequence[WorkerPod], said: Mapping[str, Waiting]) -> list[WorkerPod]:
    """The pods, each stalled one that the Events explain carrying their word as not_starting."""
    return [dataclasses.replace(p, not_starting=said[p.uid]) if p.uid in said else p for p in pods]
