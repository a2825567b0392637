"""Where a cluster cannot restart a job's pods in place, the job falls back to Recreate for
good, saying why (the restart itself: ``inplace``). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import WARNING, Conditions, condition

# The kube-scheduler's words (NodeDeclaredFeatures plugin) when no node declares what a pod
# needs, and the kubelet's reason when it admits no pod needing what it lacks.
NO_NODE_DECLARES = "didn't match Pod's required features"
KUBELET_LACKS = "PodFeatureUnsupported"
FALLBACK_REASON = "NodesLackInPlaceRestart"
NO_WATCH_REASON = "InPlaceWatchCannotStart"


def wanted(job: JobSpec, conditions: Iterable[Mapping[str, Any]]) -> bool:
    """Whether new pods of the job are built to restart in place: asked for, and not refused by
    the cluster (its condition says why)."""
    cond = condition(conditions, c.COND_IN_PLACE)
    refused = bool(cond) and cond.get("status") == "False"
    return job.restart_strategy == c.RESTART_IN_PLACE and not refused


def never_ran(pod: WorkerPod) -> bool:
    """Whether no container of the pod ever ran (unschedulable, or refused by its kubelet)."""
    refused = pod.phase == "Failed" and pod.reason == KUBELET_LACKS
    return refused or (pod.phase == "Pending" and not pod.container_ran)


def rebuilt(pods: Iterable[WorkerPod], wanted: bool) -> list[WorkerPod]:
    """The in-place pods built again without the watch, in the same attempt, now that in-place
    restarts are no longer ``wanted``: their going is no failure."""
    return [p for p in pods if p.in_place and not wanted and (never_ran(p) or p.watch_broken)]


def _first(pods: Iterable[WorkerPod]) -> WorkerPod | None:
    """The live in-place pod of lowest index among ``pods`` (found in one scan, not a sort of
    every pod: a pass over 4096 workers made two)."""
    live = [p for p in pods if p.in_place and not p.deleting]
    return min(live, key=lambda p: p.index) if live else None


def unplaceable(pods: Iterable[WorkerPod]) -> str | None:
    """Why no node can run the job's in-place pods, if so: the scheduler found no node that
    declares the feature, or a kubelet refused a pod for lacking it (a scheduler that does not
    check declared features bound it there)."""
    pod = _first(
        p
        for p in pods
        if NO_NODE_DECLARES in (p.unschedulable or "")
        or (p.phase == "Failed" and p.reason == KUBELET_LACKS)
    )
    if pod is None:
        return None
    if NO_NODE_DECLARES in (pod.unschedulable or ""):
        return f"{pod.name}: {pod.unschedulable}"
    return f"{pod.name} was refused by node {pod.node}: {pod.message}"


def unstartable(pods: Iterable[WorkerPod]) -> str | None:
    """Why the watch container of the job's in-place pods cannot start, if so: the trainer's
    image, which it runs, lacks a command the watch needs (``inplace_pod``)."""
    pod = _first(p for p in pods if p.watch_broken)
    if pod is None:
        return None
    return (
        f"{pod.name}: container {c.WATCH_CONTAINER} cannot start ({pod.watch_broken}); "
        "without the operator's helpers (spec.helpers), restarting in place runs /bin/sh and "
        "sleep from the trainer's image"
    )


def settle(conds: Conditions, job: JobSpec, pods: Iterable[WorkerPod]) -> bool:
    """Whether new pods of the job are built to restart in place (``wanted``). Where no node
    can run the in-place pods (``unplaceable``), or their watch cannot start (``unstartable``),
    the job falls back to Recreate for good: InPlaceRestart=False says why, and those pods are
    built again without."""
    if not wanted(job, conds.items):
        return False
    pods = list(pods)
    reason, why = FALLBACK_REASON, unplaceable(pods)
    if why is None:
        reason, why = NO_WATCH_REASON, unstartable(pods)
    if why is None:
        return True
    fallback = "the workers are created again, to be recreated on a failure"
    conds.set(c.COND_IN_PLACE, False, reason, f"{why}; {fallback}", WARNING)
    conds.set(c.COND_CREATED, False, reason, fallback)
    return False
