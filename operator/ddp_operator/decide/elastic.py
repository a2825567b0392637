"""Elastic jobs (``JobSpec.scalable``: torchrun's c10d rendezvous, minNodes < maxNodes), decided.
Pure.

A worker other than 0 that fails, vanishes or is being removed is replaced alone: its pod is
deleted (unless it is going already) and created again in the same attempt, while the others go
on and torchrun's agents re-rendezvous without it, then with its successor. The job counts it in
``status.replacements``, never as a group restart, up to ``failurePolicy.maxReplacements``.
Until the successor is seen, the status keeps the index and UID of the pod replaced
(``status.replacing``), so that no pass, and no operator that takes over, answers one loss
twice. Worker 0 hosts the rendezvous: its loss, or a failure that must restart the group (a
restart stuck in place), goes the group's way (``recovery``). ``spec.nodes`` may change within
[minNodes, maxNodes]: new indices are created and join the next rendezvous; indices past it are
removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..model.constants import FINISHED_PHASES
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import WARNING, Conditions, Event

REPLACED = "WorkerReplaced"


def pending(status: Mapping[str, Any], pods: Iterable[WorkerPod], attempt: int) -> dict[int, str]:
    """The replacements under way in ``attempt`` (index: UID of the pod replaced): those
    recorded in the status whose successor (a pod of that index with another UID) is not seen."""
    if int(status.get("restarts") or 0) != attempt:
        return {}
    recorded = {int(e["index"]): str(e.get("uid") or "") for e in status.get("replacing") or []}
    if not recorded:
        return {}
    seen = {(p.index, p.uid) for p in pods if p.attempt_now == attempt and p.uid}
    return {
        i: uid
        for i, uid in recorded.items()
        if not any(j == i and other != uid for j, other in seen)
    }


def replaced(pod: WorkerPod, replacing: Mapping[int, str]) -> bool:
    """Whether ``pod`` is one being replaced (no worker of the group any longer)."""
    return bool(pod.uid) and replacing.get(pod.index) == pod.uid


def not_alone(
    job: JobSpec, failed: Iterable[int], current: Mapping[int, WorkerPod], stuck: list[str]
) -> str | None:
    """Why the failed workers (indices) cannot be replaced alone, None if they can: an elastic
    job, worker 0 alive and not among them, and no restart stuck in place."""
    if not job.scalable:
        return "not an elastic job (minNodes < maxNodes, no gang or queue)"
    if stuck:
        return "a restart in place is stuck"
    if 0 in failed:
        return "worker 0 (the rendezvous host) failed"
    master = current.get(0)
    if master is None or master.deleting or master.phase in FINISHED_PHASES:
        return "worker 0 (the rendezvous host) is gone or has ended"
    return None


def replace(
    conds: Conditions,
    new: dict[str, Any],
    failed: list[int],
    current: Mapping[int, WorkerPod],
    replacing: Mapping[int, str],
    why: str,
) -> None:
    """Replace the failed workers (indices) alone, in the status being written (``new``:
    replacing, replacements), and say so (a Warning Event, ``why`` first). Their pods are no
    longer of the group that status asks for (``group``): the converge step deletes them and
    creates their successors."""
    more = {i: (current[i].uid or "") if i in current else "" for i in failed}
    new["replacements"] = int(new.get("replacements") or 0) + len(failed)
    new["replacing"] = record({**replacing, **more})
    message = f"{why}; replacing it alone (elastic: the other workers re-rendezvous)"
    conds.events.append(Event(WARNING, REPLACED, message))


def record(replacing: Mapping[int, str]) -> list[dict[str, Any]]:
    """``status.replacing``: a list (a merge patch replaces it whole)."""
    return [{"index": i, "uid": uid} for i, uid in sorted(replacing.items())]


def apart(pod: WorkerPod, job: JobSpec, attempt: int, replacing: Mapping[int, str]) -> bool:
    """Whether a pod of ``attempt`` outside the group is one of its own workers set apart
    (replaced alone, or past spec.nodes): other workers are created meanwhile."""
    return pod.attempt_now == attempt and (pod.index >= job.nodes or replaced(pod, replacing))
