"""What stands in a job's way, decided purely from its observed pods: pods with the job's names
that are not the job's (never counted, adopted or deleted: reported), and the job's own pods stuck
terminating (force-deleted when their node is lost, named when a finalizer holds them).

A pod counts as the job's only if the job is its controller (ownerReference UID): pods of an
earlier job of the same name, orphans and other controllers' pods are foreign.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import WARNING, Conditions, parse_time

# How long past its deletionTimestamp (the end of its grace period) a pod may stay before it
# counts as stuck: a kubelet that answers has removed it by then.
STUCK_AFTER = timedelta(seconds=15)


def split(job: JobSpec, pods: Iterable[WorkerPod]) -> tuple[list[WorkerPod], list[WorkerPod]]:
    """The job's own pods (controlled by its UID) and the foreign ones carrying its label."""
    own: list[WorkerPod] = []
    foreign: list[WorkerPod] = []
    for pod in pods:
        (own if job.uid and pod.owner_uid == job.uid else foreign).append(pod)
    return own, foreign


def conflict_of(job: JobSpec, objects: list[str], owner: str | None) -> tuple[str, str]:
    """(reason, message) for objects (e.g. "pod ns/a-worker-0") holding names the job needs and
    controlled by ``owner`` (a "Kind/name (uid ...)" description, or None), which is not the job.
    """
    names = ", ".join(objects[:3]) + (f" and {len(objects) - 3} more" if len(objects) > 3 else "")
    if owner and owner.startswith(f"{job.kind_name} "):
        return (
            "WaitingForPreviousJob",
            f"{names} of an earlier {owner} still exist: waiting for them to be deleted",
        )
    whose = f"controlled by {owner}" if owner else "no controller"
    verbs = ("exist", "are", "them") if len(objects) > 1 else ("exists", "is", "it")
    return (
        "NameConflict",
        f"{names} already {verbs[0]} and {verbs[1]} not this job's ({whose}): never adopted, "
        f"reused or deleted; delete or rename {verbs[2]} to let the job go on",
    )


def conflict(job: JobSpec, blockers: list[WorkerPod]) -> tuple[str, str] | None:
    """(reason, message) for foreign pods holding names the job needs, or None."""
    if not blockers:
        return None
    return conflict_of(job, [f"pod {p.name}" for p in blockers], blockers[0].owner)


def _past(pod: WorkerPod, now: datetime) -> timedelta | None:
    """How long the pod has been terminating past the end of its grace period."""
    deadline = parse_time(pod.deletion_time)
    return None if deadline is None else now - deadline


def force_delete(own: Iterable[WorkerPod], now: datetime) -> list[WorkerPod]:
    """Own pods to force-delete: terminating on a lost node, or past their grace and STUCK_AFTER
    with no finalizer (no kubelet is left to confirm the deletion)."""
    found = []
    for pod in own:
        if not pod.deleting or pod.finalizers:
            continue
        past = _past(pod, now)
        if pod.node_lost or (past is not None and past >= STUCK_AFTER):
            found.append(pod)
    return found


def held(own: Iterable[WorkerPod], now: datetime) -> tuple[list[WorkerPod], float | None]:
    """Own pods held in Terminating by finalizers past STUCK_AFTER; and, if some terminating pods
    may become stuck later, the seconds until the next one would."""
    stuck, next_check = [], None
    for pod in own:
        past = _past(pod, now) if pod.deleting else None
        if past is None:
            continue
        if past >= STUCK_AFTER:
            if pod.finalizers:
                stuck.append(pod)
        else:
            left = (STUCK_AFTER - past).total_seconds()
            next_check = left if next_check is None else min(next_check, left)
    return stuck, next_check


def held_message(stuck: list[WorkerPod], now: datetime) -> str:
    """Names the pods stuck terminating and what holds them."""
    parts = []
    for pod in stuck[:3]:
        past = _past(pod, now) or timedelta(0)
        parts.append(
            f"{pod.name} has been terminating {int(past.total_seconds())}s past its grace "
            f"period, held by finalizers {list(pod.finalizers)}"
        )
    more = f" (and {len(stuck) - 3} more)" if len(stuck) > 3 else ""
    return "; ".join(parts) + more + ": the group waits for them to go"


def report(
    conds: Conditions, own: list[WorkerPod], now: datetime, blockers: list[tuple[str, str]]
) -> float | None:
    """Set the Blocked condition from ``blockers`` ((reason, message), first is shown first) and
    the own pods held by finalizers, or clear it; returns seconds until a re-check is due."""
    stuck, next_check = held(own, now)
    if stuck:
        blockers = [*blockers, ("PodStuckTerminating", held_message(stuck, now))]
    if blockers:
        reason, message = blockers[0]
        for _, more in blockers[1:]:
            message += f"; also: {more}"
        conds.set(c.COND_BLOCKED, True, reason, message, WARNING)
    else:
        conds.clear(c.COND_BLOCKED, "Unblocked", "nothing blocks the job")
    return next_check
