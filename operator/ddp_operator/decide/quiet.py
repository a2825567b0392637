"""A hang in a script that reports no progress, found from outside it: every worker's
processes quiet, as each pod's watch judges them (``inplace_pod``: none used QUIET_PERCENT of a
CPU core over a window, once one had used more). Pure: the job, the status being written and
the group in; a failure fact (``Stalled``, decided by the failure policy like any other) and
when to look again out.

A job is judged so while its script has not reported in the attempt (one that reports is
judged by its steps, ``hangs``), stall detection is on, all its workers run (``Running`` True)
and each is an in-place pod whose trainer runs. It is stalled once every worker has been quiet
for the stall timeout (the spec's, else CEILING), counted from the latest of the workers' quiet
spells' starts and the group's start. How the signal behaves:

* a gloo or CPU job blocked in a collective, a deadlock, a sleep: every rank quiet (measured
  on the real node: 0.7% of a core a rank, torchrun's agent 0.4%);
* loading data, compiling, evaluating or saving a checkpoint use a core in some process of the
  pod (a DataLoader's workers count): not quiet. A save to slow storage that waits on I/O for
  the whole stall timeout, with no process computing, is taken for a hang: such a script can
  say its phase (``progress.report(phase="checkpoint")``), or the job set a longer timeout;
* an NCCL job whose ranks wait in a collective spin a core each (CUDA's synchronisation): not
  quiet. There the NCCL watchdog (``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``, set to the stall
  timeout: ``manifests/watchdogs``) ends the collective, a failure like any other;
* a pod that never computed (``sleep infinity``) is never quiet.

The worker that hung is named as for a script that reports (``culprit``): in the trainer image,
each rank quiet for a while says where it stands with no change to the script
(``progress_stacks.autostart``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.stall_detection import CEILING
from ..model.workers import WorkerPod
from . import culprit
from .conditions import condition, parse_time
from .failure_facts import WorkerFailure
from .hangs import blamed
from .hangs import check as steps_stalled


def stalled(
    job: JobSpec,
    status: Mapping[str, Any],
    current: Mapping[int, WorkerPod],
    progress: Mapping[str, Any] | None,
    stacks: Mapping[int, Mapping[str, Any]],
    attempt: int,
    now: datetime,
) -> tuple[WorkerFailure | None, float | None]:
    """(the stall, else seconds until it would be): by the script's steps where it reports in
    the attempt (``hangs``), else by its processes (``check``); with the worker that hung where
    ``stacks`` name it (``culprit``), and its node."""
    stall, until = steps_stalled(job, status, progress, attempt, now, stacks)
    reports = bool(progress) and (progress or {}).get("attempt") == attempt
    if stall is None and until is None and not reports:
        stall, until = check(job, status, current, now, stacks)
    if stall is not None and (pod := current.get(stall.index)) is not None:
        stall = dataclasses.replace(stall, node=pod.node)  # the culprit's
    return stall, until


def check(
    job: JobSpec,
    status: Mapping[str, Any],
    current: Mapping[int, WorkerPod],
    now: datetime,
    stacks: Mapping[int, Mapping[str, Any]] = MappingProxyType({}),
) -> tuple[WorkerFailure | None, float | None]:
    """(the stall of a job whose script has not reported in the attempt, if every worker has
    been quiet for the stall timeout; else seconds until it would be, or None while some worker
    is not quiet: its pod's next change wakes the job). Its ranks' stacks count from the group's
    start: by then each rank has been quiet long enough to have sent its latest."""
    if not job.stall_detection.enabled or status.get("replacing"):
        return None, None
    running = condition(status.get("conditions") or [], c.COND_RUNNING) or {}
    if running.get("status") != "True" or len(current) < job.nodes:
        return None, None
    spells = [parse_time(p.quiet_since) for p in current.values() if p.in_place]
    if len(spells) < len(current) or any(t is None for t in spells):
        return None, None
    since = max(
        [t for t in spells if t is not None]
        + [parse_time(running.get("lastTransitionTime")) or now]
    )
    limit = job.stall_detection.timeout_seconds or CEILING
    left = (since + timedelta(seconds=limit) - now).total_seconds()
    if left > 0:
        return None, left
    message = (
        f"no process of any worker has used {c.QUIET_PERCENT}% of a CPU core since "
        f"{since.strftime('%Y-%m-%dT%H:%M:%SZ')} (stall timeout {limit}s; the script reports no "
        "progress)"
    )
    started = parse_time(running.get("lastTransitionTime"))
    return blamed(culprit.named(stacks, started), message), None
