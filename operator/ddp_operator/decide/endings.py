"""What a finished job still does, pure: delete its pods by the clean-up policy, let the
in-place pods it keeps end (their watch), mark them so that Kueue ends their group, and delete
the job itself once its TTL is over."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import kueue
from .conditions import parse_time
from .plan import Plan


def _cleanup(job: JobSpec, pods: Iterable[WorkerPod]) -> list[WorkerPod]:
    """Pods to delete once the job has finished, by the clean-up policy."""
    if job.clean_pod_policy == c.CLEAN_NONE:
        return []
    return [
        p
        for p in pods
        if not p.deleting
        and (job.clean_pod_policy == c.CLEAN_ALL or p.phase not in c.FINISHED_PHASES)
    ]


def finished(
    job: JobSpec, pods: list[WorkerPod], now: datetime, new: dict[str, Any], result: Plan
) -> Plan:
    """Clean-up and TTL of a finished job."""
    result.create = []
    result.delete = _cleanup(job, pods)
    result.mark_unretriable = kueue.unretriable(job, pods)
    going = {id(p) for p in result.delete}
    result.finish_pods = [
        p for p in pods if p.watching and not p.finishing and not p.deleting and id(p) not in going
    ]
    done_at = parse_time(new.get("completionTime"))
    if job.ttl_seconds_after_finished is not None and done_at is not None:
        left = done_at + timedelta(seconds=job.ttl_seconds_after_finished) - now
        if left <= timedelta(0):
            result.delete_job = True
        else:
            result.requeue_after = left.total_seconds()
    return result
