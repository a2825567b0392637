"""Which workers of the attempt are created now, and the Created condition that says how far
the group is. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..manifests.builders import worker_name
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import elastic
from .conditions import NORMAL, Conditions


def missing(job: JobSpec, current: Mapping[int, WorkerPod]) -> dict[str, int]:
    """The workers of the group that have no pod: name, index."""
    return {worker_name(job, i): i for i in range(job.nodes) if i not in current}


def to_create(
    job: JobSpec,
    missing: Mapping[str, int],
    stale: Sequence[WorkerPod],
    observed: Iterable[WorkerPod],
    attempt: int,
    replacing: Mapping[int, str],
) -> list[int]:
    """The workers to create of those ``missing`` (name, index), once no pod of an earlier
    attempt is left (a worker of a new group could meet a still-running process of the old one
    at the master's address, and the two would train together; seen in real containers) and
    unless a pod of that name exists (a foreign one: ``obstacles.conflict``). A pod replaced
    alone, or past spec.nodes (scaled down), keeps no other worker waiting."""
    if any(not elastic.apart(p, job, attempt, replacing) for p in stale):
        return []
    taken = {p.name for p in observed}
    return [i for name, i in missing.items() if name not in taken]


def report(
    conds: Conditions,
    job: JobSpec,
    live: Sequence[WorkerPod],
    stale: Sequence[WorkerPod],
    attempt: int,
) -> None:
    """Created: every worker has a live pod, or what it waits for."""
    if len(live) == job.nodes:
        if not conds.true(c.COND_CREATED):
            message = f"created {job.nodes} workers (attempt {attempt})"
            conds.set(c.COND_CREATED, True, "WorkersCreated", message, NORMAL)
    elif stale:
        names = ", ".join(sorted(p.name for p in stale)[:3])
        conds.set(
            c.COND_CREATED,
            False,
            "PreviousPodsTerminating",
            f"waiting for {len(stale)} pods of an earlier attempt to go ({names})",
        )
    else:
        conds.set(c.COND_CREATED, False, "Creating", f"{len(live)} of {job.nodes} workers exist")
