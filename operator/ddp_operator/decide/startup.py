"""What keeps a job's workers from starting, in the words of whoever knows: the scheduler's
(``Unschedulable``; ``GangScheduled`` while a gang waits to be placed whole) and the kubelet's
(``ContainersNotStarting``: a mistyped image, a missing ConfigMap, a sandbox that cannot be
created: what holds a pod before any container is from its Events, ``kubelet_events``). Pure:
the job's live pods of the current attempt in, conditions set.

Neither restarts nor fails the job: the scheduler and the kubelet keep retrying, and the job goes
on once the user has fixed the cause.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import constants as c
from ..model.jobspec import Gang, JobSpec
from ..model.workers import WorkerPod
from . import inplace
from .conditions import NORMAL, WARNING, Conditions, condition

# A kubelet's retry cycle alternates these reasons for one cause; a turn is no news (no Event).
SAME_CAUSE = {"ImagePullBackOff": "ErrImagePull"}


def report(
    conds: Conditions, live: Sequence[WorkerPod], nodes: int, gang: Gang | None = None
) -> None:
    """Set or clear the conditions from the live pods of the current attempt."""
    unschedulable(conds, live, nodes)
    if gang is not None:
        placement(conds, live, nodes, gang)
    not_starting(conds, live)


def placement(conds: Conditions, live: Sequence[WorkerPod], nodes: int, gang: Gang) -> None:
    """``GangScheduled``: True once every worker of the group is bound to a node, else False
    (``WaitingForGang``) saying how many are, with the scheduler's word if it gave one."""
    placed = sum(1 for p in live if p.node)
    group = f"{gang.scheduler} group {gang.group}"
    if len(live) == nodes and placed == nodes:
        message = f"all {nodes} workers were placed together ({group})"
        conds.set(c.COND_GANG, True, "GangScheduled", message, NORMAL)
        return
    message = (
        f"{placed} of {nodes} workers placed; the scheduler places all {nodes} at once or none "
        f"({group})"
    )
    said = next((p for p in sorted(live, key=lambda p: p.index) if p.unschedulable), None)
    if said is not None:
        message += f"; {said.name}: {said.unschedulable}"
    old = condition(conds.items, c.COND_GANG) or {}
    conds.set(c.COND_GANG, False, "WaitingForGang", message, NORMAL if not old else None)


def unschedulable(conds: Conditions, live: Sequence[WorkerPod], nodes: int) -> None:
    """``Unschedulable`` with the scheduler's message for the first such worker."""
    stuck = sorted((p for p in live if p.unschedulable), key=lambda p: p.index)
    if stuck:
        conds.set(
            c.COND_UNSCHEDULABLE,
            True,
            "Unschedulable",
            f"{len(stuck)} of {nodes} workers cannot be scheduled; "
            f"{stuck[0].name}: {stuck[0].unschedulable}",
            WARNING,
        )
    else:
        conds.clear(c.COND_UNSCHEDULABLE, "Scheduled", "every worker is scheduled")


def not_starting(conds: Conditions, live: Sequence[WorkerPod]) -> None:
    """``ContainersNotStarting`` with the kubelet's reason and message for the first worker whose
    container cannot start; a Warning Event when it turns True or its cause changes."""
    stuck = [(p.name, w) for p in sorted(live, key=lambda p: p.index) if (w := p.not_starting)]
    if not stuck:
        conds.clear(c.COND_NOT_STARTING, "NoStartErrors", "no worker's container fails to start")
        return
    name, first = stuck[0]
    where = f"container {first.container}" if first.container else first.reason  # pod: Events
    message = f"{name}: {where}: {first.message or first.reason}"
    if len(stuck) > 1:
        message += f" (and {len(stuck) - 1} more worker{'s' if len(stuck) > 2 else ''})"
    old = condition(conds.items, c.COND_NOT_STARTING) or {}
    news = old.get("status") != "True" or _cause(old.get("reason")) != _cause(first.reason)
    conds.set(c.COND_NOT_STARTING, True, first.reason, message, WARNING if news else None)


def _cause(reason: str | None) -> str | None:
    return SAME_CAUSE.get(reason or "", reason)


def started(job: JobSpec, running: Sequence[WorkerPod]) -> bool:
    """Whether the group runs: every worker, or for an elastic job (``JobSpec.scalable``)
    worker 0 and at least minNodes workers (torchrun trains at any size within its bounds)."""
    if len(running) >= job.nodes:
        return True
    lo, _ = job.node_bounds
    return job.scalable and len(running) >= lo and any(p.index == 0 for p in running)


def running(
    conds: Conditions, job: JobSpec, live: Sequence[WorkerPod], attempt: int, counted: int
) -> int:
    """Set Running once the group has started (``started``: finished workers count as started;
    an in-place pod yet to restart for ``attempt`` does not), and return the live world size:
    the processes of the workers running. ``counted``: the pods in phase Running."""
    up = [p for p in live if p.phase in ("Running", "Succeeded") and not inplace.behind(p, attempt)]
    if started(job, up):
        if len(up) < job.nodes:
            why, what = "EnoughWorkersRunning", f"{len(up)} of {job.nodes}"
        else:
            why, what = "AllWorkersRunning", str(job.nodes)
        conds.set(c.COND_RUNNING, True, why, f"{what} workers running", NORMAL)
        conds.clear(
            c.COND_RESTARTING, "Restarted", f"the group is running again (attempt {attempt})"
        )
    elif not conds.true(c.COND_RESTARTING):
        message = f"{counted} of {job.nodes} workers running"
        conds.set(c.COND_RUNNING, False, "WorkersPending", message)
    return len(up) * job.procs_per_node
