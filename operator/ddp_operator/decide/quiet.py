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
* an NCCL job whose ranks wait in a collective spin a core each (CUDA's synchronisation; on
  an H200, 100% of a core): its pod is not quiet. Each rank says so itself instead: its flight
  recorder shows it in one unfinished collective, and its stack says since when, again every
  STACK_RESEND_SECONDS while it lasts (``progress_stacks``). A worker all of whose ranks still
  say so (the latest within two of those periods) is quiet since the latest of their spells, as
  far as their latest stacks say: the stall is found at most one period after its timeout;
* a pod that never computed (``sleep infinity``) is never quiet.

The worker that hung is named as for a script that reports (``culprit``): in any image (the
operator's delivered helpers), each rank quiet for a while says where it stands with no change to
the script (``progress_stacks.autostart``).

A script that reports by Kubeflow's protocol (``status.progress.protocol``: Hugging Face's
KubeflowCallback, which posts at step ends only) cannot announce a phase. Its step stall (``hangs``)
is put off while some worker computes by the same signal (an in-place pod not quiet whose ranks do
not say they wait in a collective: an evaluation), for up to UNANNOUNCED seconds from the step's
last advance, as an announced phase with no bound; where no worker is seen computing (all quiet, or
pods with no watch) it stands. The watch's word lags: a pod counts as quiet only once it has said so
for SETTLES after the later of its spell's start and the step's last advance (two windows and a
probe period, and a margin). A judgement of the steps before (a script whose steps barely compute,
or whose callback skipped the last post: it posts every 5 s at most), one window straddling the
evaluation's start, or one failed probe would end an evaluation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.stall_detection import CEILING, PHASE_DEFAULT
from ..model.workers import WorkerPod
from . import culprit
from .conditions import condition, parse_time
from .failure_facts import WorkerFailure
from .hangs import blamed, timeout
from .hangs import check as steps_stalled

AGAIN = 5.0  # seconds: a look again while the ranks' stacks have yet to say the timeout passed
# Seconds a pod's quiet must have lasted, from the later of its spell's start and the step's last
# advance, to say its processes stopped computing (``computing``): the watch judges a window and
# its probe says so a period later, so work that began after a quiet window reads as quiet for up
# to two windows and a period (a window straddling its start judged quiet), plus the margin.
SETTLES = 2 * c.QUIET_WINDOW_SECONDS + c.QUIET_PROBE_SECONDS + 10
UNANNOUNCED = PHASE_DEFAULT  # seconds a Kubeflow-protocol script may compute without a step
KUBEFLOW = "kubeflow"  # ``status.progress.protocol`` (``kubeflow_status.PROTOCOL``)


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
    if stall is not None and progress and progress.get("protocol") == KUBEFLOW:
        stall, until = _unannounced(job, status, current, progress, stacks, now, stall)
    reports = bool(progress) and (progress or {}).get("attempt") == attempt
    if stall is None and until is None and not reports:
        stall, until = check(job, status, current, now, stacks)
    if stall is not None and (pod := current.get(stall.index)) is not None:
        stall = dataclasses.replace(stall, node=pod.node)  # the culprit's
    return stall, until


def _unannounced(
    job: JobSpec,
    status: Mapping[str, Any],
    current: Mapping[int, WorkerPod],
    progress: Mapping[str, Any],
    stacks: Mapping[int, Mapping[str, Any]],
    now: datetime,
    stall: WorkerFailure,
) -> tuple[WorkerFailure | None, float | None]:
    """A Kubeflow-protocol script's step stall, put off (None, seconds left) while some worker
    computes, up to UNANNOUNCED seconds from the step's last advance; past it, said so."""
    running = condition(status.get("conditions") or [], c.COND_RUNNING) or {}
    started = parse_time(running.get("lastTransitionTime"))
    starts = (parse_time(progress.get("advanced") or progress.get("updated")), started)
    clock = max((t for t in starts if t is not None), default=now)
    if not computing(current, stacks, job.procs_per_node, started, now, clock):
        return stall, None
    limit = max(UNANNOUNCED, timeout(job, progress))
    left = (clock + timedelta(seconds=limit) - now).total_seconds()
    if left > 0:  # looked at again then, or once a quiet spell too young to count has lasted
        return None, min([left, *_settling(current, now, clock)])
    words = f"; its processes still compute, past the {limit}s allowed to a stretch without steps"
    return dataclasses.replace(stall, message=stall.message + words), None


def computing(
    current: Mapping[int, WorkerPod],
    stacks: Mapping[int, Mapping[str, Any]],
    procs: int,
    started: datetime | None,
    now: datetime,
    advanced: datetime | None,
) -> bool:
    """Whether some worker's processes compute: an in-place pod (its watch judges them) not
    quiet for SETTLES since the later of its spell's start and ``advanced`` (the step's last
    advance), and whose ranks' own stacks do not all say they stand still, one of them in a
    collective it has not completed (an NCCL rank spins a core there: what the watch saw). A
    pod whose ranks say only that they used no CPU computes by its watch: its other processes
    (a DataLoader's workers) may compute for them."""
    return any(
        p.in_place
        and not _settled(_quiet_age(p, now, advanced))
        and _still(stacks, i, procs, started, now, waiting=True) is None
        for i, p in current.items()
    )


def _quiet_age(pod: WorkerPod, now: datetime, advanced: datetime | None) -> float | None:
    """Seconds the pod has been quiet, counted from the later of its spell's start and
    ``advanced``; None where it is not quiet."""
    since = parse_time(pod.quiet_since)
    if since is None:
        return None
    return (now - max(since, advanced or since)).total_seconds()


def _settled(age: float | None) -> bool:
    """Whether a quiet spell of ``age`` (``_quiet_age``) is the watch's judgement."""
    return age is not None and age >= SETTLES


def _settling(
    current: Mapping[int, WorkerPod], now: datetime, advanced: datetime | None
) -> list[float]:
    """Seconds until each quiet spell too young to count has lasted SETTLES."""
    ages = [_quiet_age(p, now, advanced) for p in current.values() if p.in_place]
    return [SETTLES - age for age in ages if age is not None and not _settled(age)]


def check(
    job: JobSpec,
    status: Mapping[str, Any],
    current: Mapping[int, WorkerPod],
    now: datetime,
    stacks: Mapping[int, Mapping[str, Any]] = MappingProxyType({}),
) -> tuple[WorkerFailure | None, float | None]:
    """(the stall of a job whose script has not reported in the attempt, if every worker has
    been quiet for the stall timeout, by its pod's watch or its ranks' own stacks; else seconds
    until it would be, or None while some worker is not quiet: its pod's next change, or a
    rank's next stack, wakes the job). Its ranks' stacks count from the group's start: by then
    each rank has been quiet long enough to have sent its latest."""
    if not job.stall_detection.enabled or status.get("replacing"):
        return None, None
    running = condition(status.get("conditions") or [], c.COND_RUNNING) or {}
    if running.get("status") != "True" or len(current) < job.nodes:
        return None, None
    started = parse_time(running.get("lastTransitionTime"))
    by_pod = {i: parse_time(p.quiet_since) for i, p in current.items() if p.in_place}
    spells = [
        (t, now) if (t := by_pod.get(i)) else _still(stacks, i, job.procs_per_node, started, now)
        for i in current
    ]
    if any(s is None for s in spells):
        return None, None
    since = max([s[0] for s in spells if s is not None] + [started or now])
    told = min(s[1] for s in spells if s is not None)  # quiet as far as all have said
    limit = job.stall_detection.timeout_seconds or CEILING
    if (told - since).total_seconds() < limit:  # past the clock: a rank's next stack says it
        left = (since + timedelta(seconds=limit) - now).total_seconds()
        return None, left if left > 0 else AGAIN
    at = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    if all(by_pod.get(i) for i in current):
        message = f"no process of any worker has used {c.QUIET_PERCENT}% of a CPU core since {at}"
    else:
        message = (
            f"every rank has stood still since {at}: in one unfinished collective (its flight "
            f"recorder) or under {c.QUIET_PERCENT}% of a CPU core"
        )
    message += f" (stall timeout {limit}s; the script reports no progress)"
    return blamed(culprit.named(stacks, started), message), None


def _still(
    stacks: Mapping[int, Mapping[str, Any]],
    worker: int,
    procs: int,
    started: datetime | None,
    now: datetime,
    waiting: bool = False,
) -> tuple[datetime, datetime] | None:
    """(since when, until when) every rank of ``worker`` has stood still by its own stacks: each
    rank's latest, sent after the group started and within two resend periods, says since when
    it is quiet (``waiting``: and one of them stands in a collective it entered and has not
    completed, by its flight recorder); None where a rank has not said so."""
    mine = [s for s in stacks.values() if s.get("worker") == worker]
    fresh = now - timedelta(seconds=2 * c.STACK_RESEND_SECONDS)
    spells = []
    for s in mine:
        at = parse_time(s.get("at"))
        if at is None or at < fresh or (started is not None and at < started):
            return None
        spells.append((at - timedelta(seconds=int(s.get("quietSeconds") or 0)), at))
    if not spells or len(mine) < procs or (waiting and not any(map(culprit.in_collective, mine))):
        return None
    return max(t for t, _ in spells), min(at for _, at in spells)
