"""The job's group as a status says it should be, from the observed pods: its attempt, the
workers of that attempt by index (``current``), where each stands in its restart and since when
(``standing``), and the pods that are not (``stale``). Pure.

A restart or a replacement only writes the status (``recovery``, ``elastic``); ``reconcile``
then takes the group again from that status and converges on it, on the same pass and on every
later one: it deletes the stale pods, tells in-place pods behind the attempt, creates the
missing workers. So a pass killed after its status write and before its pod actions leaves
the next pass the same work (JobSet's shape: one number, children in buckets, one converge).

What the status holds for it:

* ``restarts``: the attempt (pods created in or told a later one, whose status write was lost,
  raise it);
* ``createdInAttempt``: the attempt the group's pods were created in. A restart that recreates
  the group moves it to its attempt; one in place keeps it. A pod created before it is no
  worker, even one that could restart in place, so that a Recreate decided and not yet carried
  out is carried out, not turned into an in-place restart;
* ``attemptStartTime``: when the attempt began, from which a pod's restart is timed until
  worker 0 is told it (``inplace.standings``);
* ``replacing``: workers of an elastic job replaced alone whose successor is not seen yet
  (``elastic``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import elastic, inplace


@dataclass(frozen=True)
class Group:
    """The group of ``attempt``: its workers by index, the pods that are not, the replacements
    under way (index: UID of the pod replaced), the attempt its pods were created in and where
    each in-place worker stands in the attempt's restart (in the order of ``current``)."""

    attempt: int
    created_in: int
    current: Mapping[int, WorkerPod]
    stale: tuple[WorkerPod, ...]
    replacing: Mapping[int, str]
    standing: tuple[inplace.Standing, ...]


def attempt(status: Mapping[str, Any], pods: Iterable[WorkerPod]) -> int:
    """The job's attempt: its status's, or a later one its pods were created in or told."""
    return max([int(status.get("restarts") or 0), *(p.attempt_now for p in pods)])


def of(job: JobSpec, status: Mapping[str, Any], pods: list[WorkerPod], in_place: bool) -> Group:
    """The group ``status`` asks for (with the conditions of the pass), from the job's own
    ``pods``; ``in_place``: whether its in-place pods can still restart where they stand
    (``inplace_fallback``)."""
    now = attempt(status, pods)
    created_in = int(status.get("createdInAttempt") or 0)
    replacing = elastic.pending(status, pods, now)
    current = {
        p.index: p
        for p in pods
        if p.index < job.nodes
        and p.attempt >= created_in
        and inplace.belongs(p, now, in_place)
        and not elastic.replaced(p, replacing)
    }
    chosen = {id(p) for p in current.values()}  # by identity: `in` a list is O(N) field-wise
    stale = tuple(p for p in pods if id(p) not in chosen)
    standing = tuple(inplace.standings(current.values(), now, status))
    return Group(now, created_in, current, stale, replacing, standing)
