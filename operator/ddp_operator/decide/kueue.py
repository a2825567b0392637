"""Kueue's plain-pod group integration, the decisions (what a worker carries to join the group:
``builders.join_queue``). Pure: the job, its pods and what the loop remembers in; conditions and
actions out.

Kueue's webhook gates every worker (scheduling gate ``kueue.x-k8s.io/admission``) until Kueue
admits the whole group within its ClusterQueue's quota; the job says so in ``Queued`` and
``Admitted``. When Kueue evicts or preempts the group it marks each pod (condition
``TerminationTarget``) and deletes it: that is no failure and costs no restart; the workers are
recreated with the same group, gated again, and wait for the next admission. Kueue keeps its
finalizer on a deleted pod of a group until a replacement with another name appears; workers
keep their names (their DNS identity), so once a deleted worker has ended (or never ran) the
operator takes Kueue's finalizer off it, and off nothing else. A job that is over
marks its pods ``kueue.x-k8s.io/retriable-in-group: "false"`` so that Kueue ends the group and
frees its quota (Kueue never ends a group while it may still get replacement pods).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import NORMAL, WARNING, Conditions

PodKey = tuple[str, int]  # (pod name, attempt)
# The mark that tells Kueue a group gets no more replacement pods: Kueue then ends it.
UNRETRIABLE = {c.KUEUE_RETRIABLE_ANNOTATION: "false"}
# How often a job whose group Kueue holds re-reads the group's Workload: soon while Kueue has
# not said why yet (it creates the Workload after the pods), then rarely.
RECHECK_UNTOLD, RECHECK_TOLD = 2.0, 30.0


@dataclass(frozen=True)
class Holdup:
    """Kueue's word on a group it has not admitted: its Workload's ``QuotaReserved`` False."""

    reason: str  # Kueue's: Pending (waits for quota), Inadmissible (a missing queue), ...
    message: str

    @property
    def misconfigured(self) -> bool:
        """Kueue can never admit the group as things are (no such LocalQueue or ClusterQueue,
        or one that is stopped): a user's mistake to fix, not a wait."""
        return self.reason not in ("Pending", "WaitingForQuota", "QuotaReserved")


def holdup(workload: Mapping[str, Any] | None) -> Holdup | None:
    """Why Kueue has not admitted the group, from its Workload (None if it has not said)."""
    for cond in ((workload or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == c.KUEUE_QUOTA_RESERVED and cond.get("status") == "False":
            return Holdup(str(cond.get("reason") or ""), str(cond.get("message") or ""))
    return None


def pod_group(job: JobSpec) -> bool:
    """Whether the job's workers are Kueue's pod group (not a job-level Workload's)."""
    return job.queue is not None and not job.queue.workload


def waiting(job: JobSpec, pods: Iterable[WorkerPod]) -> bool:
    """Whether Kueue holds any of the job's workers gated (its Workload then says why)."""
    return pod_group(job) and any(p.gated and not p.deleting for p in pods)


def eviction(
    current: Mapping[int, WorkerPod], evicted: Mapping[PodKey, str], attempt: int
) -> str | None:
    """Why Kueue stopped this attempt's group, if it did: a current pod it marked, or one it
    deleted that the loop remembers (``evicted``: what the watch showed of pods as they went)."""
    for pod in sorted(current.values(), key=lambda p: p.index):
        if pod.stopped:
            return pod.stopped
    present = {p.name for p in current.values()}
    gone = (why for (n, a), why in sorted(evicted.items()) if a == attempt and n not in present)
    return next(gone, None)


def evict(conds: Conditions, current: Mapping[int, WorkerPod], why: str) -> list[WorkerPod]:
    """The group was evicted: say so, and return what is left of it to delete (Kueue deletes the
    pods itself; a worker it has not reached yet is deleted too, as the group goes whole)."""
    message = (
        f"Kueue stopped the group ({why}); its workers are recreated and wait to be admitted "
        "again (no restart counted)"
    )
    conds.set(c.COND_QUEUED, True, "Evicted", message, WARNING)
    conds.set(c.COND_ADMITTED, False, "Evicted", message)
    conds.set(c.COND_CREATED, False, "Evicted", "the group was evicted by Kueue")
    conds.set(c.COND_RUNNING, False, "Evicted", "the group was evicted by Kueue")
    return [p for p in current.values() if not p.deleting]


def release(pods: Iterable[WorkerPod]) -> list[WorkerPod]:
    """The job's pods being deleted (by Kueue or by the operator) that have ended, or never ran,
    and that only Kueue's finalizer still keeps: Kueue lets such a pod go only once a replacement
    of another name appears, and a worker's replacement has its name."""
    return [
        p
        for p in pods
        if p.deleting
        and c.KUEUE_FINALIZER in p.finalizers
        and (p.phase in ("Succeeded", "Failed") or not p.node)
    ]


def report(
    conds: Conditions, live: Sequence[WorkerPod], job: JobSpec, told: Holdup | None = None
) -> float | None:
    """``Queued`` while Kueue holds workers gated (with Kueue's word, ``told``, from the group's
    Workload; ``Inadmissible`` and a Warning if Kueue can never admit it as things are),
    ``Admitted`` once it let the whole group go; both False, with a Warning, if Kueue did not
    take the pods at all (not installed, no pod integration, or a namespace outside its
    selector): they then run unqueued. Returns when to read the Workload again, if needed."""
    queue = job.queue
    if queue is None or queue.workload or not live:
        return None
    where = f"LocalQueue {queue.name}, Workload {queue.group}"
    if not any(p.queue_managed for p in live):
        message = (
            f"the workers carry {c.KUEUE_QUEUE_LABEL}={queue.name} but Kueue did not take them "
            f"(is Kueue's pod integration enabled for namespace {job.namespace}?); they are "
            "scheduled without waiting for admission"
        )
        conds.set(c.COND_QUEUED, False, "NotManagedByKueue", message, WARNING)
        conds.set(c.COND_ADMITTED, False, "NotManagedByKueue", message)
        return None
    gated = [p for p in live if p.gated]
    if gated:
        message = (
            f"Kueue holds {len(gated)} of {job.nodes} workers until it admits the group ({where})"
        )
        reason, event = "WaitingForAdmission", NORMAL
        if told is not None:
            message += f": {told.message} ({told.reason})"
            if told.misconfigured:
                reason, event = "Inadmissible", WARNING
        conds.set(c.COND_QUEUED, True, reason, message, event)
        conds.set(c.COND_ADMITTED, False, reason, message)
        return RECHECK_UNTOLD if told is None else RECHECK_TOLD
    if len(live) == job.nodes:
        message = f"Kueue admitted the group of {job.nodes} workers ({where})"
        conds.set(c.COND_QUEUED, False, "Admitted", message)
        conds.set(c.COND_ADMITTED, True, "Admitted", message, NORMAL)
    return None


def left_behind(job_uid: str | None, pods: Iterable[WorkerPod]) -> list[WorkerPod]:
    """Once the job itself is deleted: its pods Kueue still holds, to mark so that Kueue ends
    the group and lets them go (garbage collection deletes them; Kueue's finalizer would keep
    them Terminating while Kueue waits for replacements)."""
    return [
        p
        for p in pods
        if job_uid
        and p.owner_uid == job_uid
        and c.KUEUE_FINALIZER in p.finalizers
        and not p.unretriable
    ]


def not_failures(evicted: Mapping[PodKey, str], attempt: int) -> Collection[PodKey]:
    """The (name, attempt) of workers whose pods Kueue removed: missing, but not failed."""
    return {k for k in evicted if k[1] == attempt}


def unretriable(job: JobSpec, pods: Iterable[WorkerPod]) -> list[WorkerPod]:
    """Once the job is over: its pods still to mark so that Kueue ends the group."""
    if not pod_group(job):
        return []
    return [p for p in pods if not p.unretriable]
