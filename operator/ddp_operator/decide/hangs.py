"""A training that stopped advancing, found from its own progress reports: in a synchronous DDP job
a hang anywhere (a peer stuck, a deadlock, a partition, a wedged device) stops rank 0's step at
the next collective, long before PyTorch's own timeouts (10 minutes for NCCL, 30 for gloo).
Pure: the job, its status and its latest report in; a failure fact (``Stalled``, decided by the
failure policy like any other) and when to look again out.

A job is stalled when stall detection is on, all its workers run (``Running`` True), it has
reported in this attempt, and its step has not advanced for the stall timeout, counted from the
later of the step's last advance (``progress.advanced``: an attempt's first report starts it, so
loading a checkpoint or the first step is never a stall) and the group's start (the ``Running``
condition's last transition: a resumed or restarted group starts afresh; and an elastic job's
latest replacement of a worker). A job that never reports is never stalled. Everything is read
from the status: an operator that restarts or takes over finds the same clock.

A script in a phase it announced (``report(phase="checkpoint", phase_timeout=900)``: a save, an
evaluation) is timed by that phase's bound from when the phase began (``phaseSince``), not by
the stall timeout; its next report without a phase ends the phase. The automatic timeout is
never under LEAST_STEPS step intervals, so that a slow step is never a hang.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from ..model import constants as c
from ..model import failure_policy as fp
from ..model.jobspec import JobSpec
from ..model.stall_detection import CEILING, FLOOR, LEAST_STEPS, PHASE_DEFAULT, STEPS
from . import culprit
from .conditions import condition, parse_time
from .failure_facts import STALLED, WorkerFailure

__all__ = ["STALLED", "blamed", "check", "timeout"]


def timeout(job: JobSpec, progress: Mapping[str, Any] | None) -> int:
    """The stall timeout in seconds: the spec's, else automatic from the step interval."""
    if job.stall_detection.timeout_seconds is not None:
        return job.stall_detection.timeout_seconds
    step = (progress or {}).get("stepSeconds")
    if not step:
        return CEILING
    usual = min(CEILING, max(FLOOR, STEPS * float(step)))
    return math.ceil(max(usual, LEAST_STEPS * float(step)))


def _replaced(status: Mapping[str, Any], attempt: int) -> datetime | None:
    """When an elastic job last began replacing a worker in ``attempt`` (its agents then
    re-rendezvous and reload: no step meanwhile)."""
    first = status.get("firstFailure") or {}
    if first.get("action") != fp.REPLACE_WORKER or first.get("attempt") != attempt:
        return None
    return parse_time(first.get("time"))


def check(
    job: JobSpec,
    status: Mapping[str, Any],
    progress: Mapping[str, Any] | None,
    attempt: int,
    now: datetime,
    stacks: Mapping[int, Mapping[str, Any]] = MappingProxyType({}),
) -> tuple[WorkerFailure | None, float | None]:
    """(the stall, if the job is stalled; else seconds until it would be). ``status``: the
    status being written (its conditions; an elastic job's replacements start the clock too,
    and none is judged while one is under way); ``stacks``: where the attempt's quiet ranks
    stand (``culprit``)."""
    if not job.stall_detection.enabled or not progress or progress.get("attempt") != attempt:
        return None, None
    running = condition(status.get("conditions") or [], c.COND_RUNNING) or {}
    if running.get("status") != "True" or status.get("replacing"):
        return None, None
    advanced = parse_time(progress.get("advanced") or progress.get("updated"))
    if advanced is None:
        return None, None
    phase, phase_since = progress.get("phase"), parse_time(progress.get("phaseSince"))
    if phase and phase_since is not None:
        advanced = phase_since
    starts = (advanced, parse_time(running.get("lastTransitionTime")), _replaced(status, attempt))
    clock = max(t for t in starts if t is not None)
    if phase:  # its own bound; none given: an hour, or the stall timeout if longer
        bound = progress.get("phaseTimeoutSeconds")
        limit = int(bound) if bound else max(PHASE_DEFAULT, timeout(job, progress))
    else:
        limit = timeout(job, progress)
    left = (clock + timedelta(seconds=limit) - now).total_seconds()
    if left > 0:
        return None, left
    if phase:
        message = (
            f"the training has been in phase {phase} since {progress.get('phaseSince')} at "
            f"step {progress.get('step')} (phase timeout {limit}s)"
        )
    else:
        message = (
            f"the training's step has not advanced from {progress.get('step')} since "
            f"{progress.get('advanced') or progress.get('updated')} (stall timeout {limit}s"
            f"{'' if job.stall_detection.timeout_seconds else ', automatic'})"
        )
    return blamed(culprit.named(stacks, advanced), message), None


def blamed(hung: culprit.Culprit | None, message: str) -> WorkerFailure:
    """The stall, on the worker that hung where it was named (its words lead the message)."""
    if hung is None:
        return WorkerFailure(-1, "", STALLED, message=message, time=None, finished=False)
    message = f"{hung.words}; {message}"
    return WorkerFailure(hung.index, hung.pod, STALLED, message=message, time=None, finished=False)
