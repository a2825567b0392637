"""In-place group restarts, decided (pods built by ``inplace_pod``). Pure.

An in-place pod stays in its group across attempts: the operator records the next attempt in the
job's status, then gives it to each pod (its annotation, ``tell``); each pod's sidecar sees it and
the kubelet restarts the pod's containers. A pod of an earlier attempt that can still be
restarted that way belongs to the current group; one that cannot (ended, being deleted) is
stale. The group runs again once every pod was restarted for the current attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from . import constants as c
from .conditions import condition, parse_time
from .endings import FINISHED_PHASES
from .jobspec import JobSpec
from .workers import WorkerPod


def belongs(pod: WorkerPod, attempt: int) -> bool:
    """Whether ``pod`` is in the group of ``attempt``: created for it, given it, or to be given
    it (an in-place pod still alive)."""
    ended = pod.phase in FINISHED_PHASES
    if pod.attempt_now == attempt:  # unless it ended before it restarted for the attempt
        return not (ended and pod.in_place and pod.restarted < pod.restarts_due)
    return pod.in_place and pod.attempt_now < attempt and not ended and not pod.deleting


def to_tell(current: Iterable[WorkerPod], attempt: int) -> list[WorkerPod]:
    """The group's in-place pods not yet given ``attempt``."""
    return [p for p in current if p.in_place and p.attempt_now < attempt and not p.deleting]


def behind(pod: WorkerPod, attempt: int) -> bool:
    """Whether an in-place pod has yet to be given ``attempt`` or to restart for it."""
    return pod.in_place and (pod.attempt_now < attempt or pod.restarted < pod.restarts_due)


def wanted(job: JobSpec, conditions: Iterable[Mapping[str, Any]]) -> bool:
    """Whether new pods of the job are built to restart in place: asked for, and not refused by
    the cluster (its condition says why)."""
    cond = condition(conditions, c.COND_IN_PLACE)
    refused = bool(cond) and cond.get("status") == "False"
    return job.restart_strategy == c.RESTART_IN_PLACE and not refused


def stuck(
    current: Iterable[WorkerPod], attempt: int, status: Mapping[str, Any], now: datetime
) -> list[str]:
    """The pods given ``attempt`` whose kubelet has not begun to restart them
    IN_PLACE_TIMEOUT_SECONDS after the restart was decided (its Restarting condition)."""
    cond = condition(status.get("conditions") or [], c.COND_RESTARTING)
    since = parse_time((cond or {}).get("lastTransitionTime"))
    if since is None or now - since < timedelta(seconds=c.IN_PLACE_TIMEOUT_SECONDS):
        return []
    return [
        f"{p.name} was not restarted in place within {c.IN_PLACE_TIMEOUT_SECONDS}s"
        + (f" (does node {p.node} run a kubelet with RestartAllContainers?)" if p.node else "")
        for p in current
        if p.in_place and p.attempt_now == attempt and p.reran < p.restarts_due and not p.deleting
    ]


def recheck(current: Iterable[WorkerPod], attempt: int) -> float | None:
    """Seconds until a restart still pending may be found stuck, if any pod is behind."""
    if any(behind(p, attempt) for p in current):
        return float(c.IN_PLACE_TIMEOUT_SECONDS)
    return None


def obstacle(job: JobSpec, current: Mapping[int, WorkerPod], stuck_pods: list[str]) -> str | None:
    """Why the group cannot restart in place now (None: it can): in-place restarts are wanted,
    and every worker is an in-place pod, alive and not going."""
    if job.restart_strategy != c.RESTART_IN_PLACE:
        return f"spec.restartStrategy is {job.restart_strategy}"
    if stuck_pods:
        return stuck_pods[0]
    for i in range(job.nodes):
        pod = current.get(i)
        if pod is None:
            return f"worker {i} has no pod"
        if not pod.in_place:
            return f"{pod.name} was not created to restart in place"
        if pod.deleting:
            return f"{pod.name} is being deleted"
        if pod.phase in FINISHED_PHASES:
            return f"{pod.name} has ended ({pod.phase})"
    return None
