"""In-place group restarts, decided (pods built by ``inplace_pod``). Pure.

An in-place pod stays in its group across attempts: the operator records the next attempt in the
job's status, then gives it to each pod (its annotation, ``tell``); each pod's watch container sees
it and the kubelet restarts the pod's containers. A pod of an earlier attempt that can still be
restarted that way belongs to the current group; one that cannot (ended, being deleted) is
stale. The group runs again once every pod was restarted for the current attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import WARNING, Conditions, condition, parse_time

# The kube-scheduler's words (NodeDeclaredFeatures plugin) when no node declares what a pod
# needs, and the kubelet's reason when it admits no pod needing what it lacks.
NO_NODE_DECLARES = "didn't match Pod's required features"
KUBELET_LACKS = "PodFeatureUnsupported"
FALLBACK_REASON = "NodesLackInPlaceRestart"
NO_WATCH_REASON = "InPlaceWatchCannotStart"


def belongs(pod: WorkerPod, attempt: int, wanted: bool = True) -> bool:
    """Whether ``pod`` is in the group of ``attempt``: created for it, given it, or to be given
    it (an in-place pod still alive). An in-place pod that never ran, or whose watch cannot
    start, is not, once in-place restarts are no longer ``wanted``: it is built again without."""
    if rebuilt([pod], wanted):
        return False
    ended = pod.phase in c.FINISHED_PHASES and not pod.watching
    if pod.attempt_now == attempt:  # unless it ended before it restarted for the attempt
        return not (ended and pod.in_place and pod.restarted < pod.restarts_due)
    return pod.in_place and pod.attempt_now < attempt and not ended and not pod.deleting


def rebuilt(pods: Iterable[WorkerPod], wanted: bool) -> list[WorkerPod]:
    """The in-place pods built again without the watch, in the same attempt, now that in-place
    restarts are no longer ``wanted``: their going is no failure."""
    return [p for p in pods if p.in_place and not wanted and (never_ran(p) or p.watch_broken)]


def to_tell(current: Iterable[WorkerPod], attempt: int) -> list[WorkerPod]:
    """The group's in-place pods to give ``attempt`` now: those not yet given it, but only
    worker 0 while it still runs a trainer of an earlier attempt. A pod restarts as soon as it is
    told, and one whose trainer had ended restarts at once: its new processes would find worker
    0's old ones still serving the rendezvous and join them (seen in real containers)."""
    current = list(current)
    due = [p for p in current if p.in_place and p.attempt_now < attempt and not p.deleting]
    master = next((p for p in current if p.index == 0), None)
    old = master is not None and master.in_place and master.trainer_running
    if old and (master.attempt_now < attempt or master.restarted < master.restarts_due):
        return [p for p in due if p is master]
    return due


def behind(pod: WorkerPod, attempt: int) -> bool:
    """Whether an in-place pod has yet to be given ``attempt`` or to restart for it."""
    return pod.in_place and (pod.attempt_now < attempt or pod.restarted < pod.restarts_due)


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
    image, which it runs, has no ``/bin/sh``."""
    pod = _first(p for p in pods if p.watch_broken)
    if pod is None:
        return None
    return (
        f"{pod.name}: container {c.WATCH_CONTAINER} cannot start ({pod.watch_broken}); "
        "restarting in place runs /bin/sh from the trainer's image"
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


def limit(job: JobSpec) -> int:
    """Seconds a restart in place may take to begin on every pod: worker 0's old processes end
    first, then the others' (each within the pods' termination grace period), and a margin."""
    grace = (job.template.get("spec") or {}).get("terminationGracePeriodSeconds")
    return c.IN_PLACE_TIMEOUT_SECONDS + 2 * int(30 if grace is None else grace)


def stuck(
    current: Iterable[WorkerPod],
    attempt: int,
    status: Mapping[str, Any],
    now: datetime,
    seconds: int,
) -> list[str]:
    """The pods of the group not restarted for ``attempt`` ``seconds`` after the restart was
    decided (its Restarting condition): given it, but their kubelet has not restarted their
    watch; or never given it (they wait for worker 0's old trainer to end, which the kubelet's
    status never showed: seen once on the real node, worker 0 ran the new attempt alone)."""
    cond = condition(status.get("conditions") or [], c.COND_RESTARTING)
    since = parse_time((cond or {}).get("lastTransitionTime"))
    if since is None or now - since < timedelta(seconds=seconds):
        return []
    found = []
    for p in current:
        if not p.in_place or p.deleting:
            continue
        if p.attempt_now < attempt:
            found.append(f"{p.name} was not given attempt {attempt} within {seconds}s")
        elif p.attempt_now == attempt and p.reran < p.restarts_due:
            found.append(
                f"{p.name} was not restarted in place within {seconds}s"
                + (
                    f" (does node {p.node} run a kubelet with RestartAllContainers?)"
                    if p.node
                    else ""
                )
            )
    return found


def recheck(current: Iterable[WorkerPod], attempt: int, seconds: float) -> float | None:
    """Seconds until a restart still pending may be found stuck, if any pod is behind."""
    if any(behind(p, attempt) for p in current):
        return float(seconds)
    return None


def obstacle(
    job: JobSpec, current: Mapping[int, WorkerPod], stuck_pods: list[str], possible: bool = True
) -> str | None:
    """Why the group cannot restart in place now (None: it can): in-place restarts are wanted
    and ``possible`` on this cluster, and every worker is an in-place pod, alive and not going."""
    if job.restart_strategy != c.RESTART_IN_PLACE:
        return f"spec.restartStrategy is {job.restart_strategy}"
    if not possible:
        return f"the {c.COND_IN_PLACE} condition says why"
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
        if pod.phase in c.FINISHED_PHASES and not pod.watching:
            return f"{pod.name} has ended ({pod.phase})"
    return None
