"""In-place group restarts: the state machine of one restart, read top to bottom (what the
pods carry: ``inplace_pod``; a cluster that cannot restart them: ``inplace_fallback``). Pure.

The job's attempt is ``status.restarts``, moved on by ``failure_policy`` and written before any
pod hears of it. In that attempt, each in-place pod of the group is in one ``state``::

    WAITS ──worker 0's old trainer ended──▶ TO_TELL ──told──▶ RESTARTING ──restarted──▶ RUNS
    HELD ──no pod restarts for an earlier attempt──┘              │
                                            not restarted within ``limit`` of being told:
                                            stuck, the group is recreated (``stuck``)

* **told**: the runner writes the attempt to the job's ConfigMap (where ``DDP_ATTEMPT`` comes
  from), then to the pod: its attempt annotation and the time (``told-at``), in one patch.
* **restarted**: the pod's watch container sees the annotation differ from the attempt it
  started with and exits 86; its rule makes the kubelet restart every container of the pod.
  The trainer's restart count shows it: the tell records the count then (``restarts-when-told``),
  and the pod is restarted once its count has moved past it (``WorkerPod.restart_pending``),
  however many attempts it was told since its creation.
* **worker 0 first**: while worker 0 still runs a trainer of an earlier attempt, the others
  WAIT: a pod restarts as soon as it is told, and new processes would find worker 0's old ones
  still serving the rendezvous and join them (seen in real containers).
* **one tell per restart**: a pod still RESTARTING is told no later attempt until its restart
  shows: a restart already under way may have started its containers with the attempt before,
  and counted for the later one it would let the group run with the pod still to restart.
* **no new attempt while a pod starts**: no pod is told an attempt (and the ConfigMap keeps the
  one before) while a pod of the group still restarts for an earlier one, or starts: told and
  not restarted, or its containers not all started again (``restarting_before``; the others are
  HELD). Its containers take ``DDP_ATTEMPT`` from the ConfigMap as they start: moved on, they
  would start on the new attempt while the pod's annotation says the one before, and once told,
  its watch would see nothing new; the restart the operator waits for would never come, and the
  group be recreated (seen on the real node, about one CI run in five).
* **deadlines per pod** (``standings``, taken once per pass into the group): a RESTARTING
  pod's from when it was told, a WAITING or HELD pod's from when worker 0 was told this
  attempt (not yet told it: from the attempt's start, ``status.attemptStartTime``); never a
  tell of an earlier attempt's time, nor the Restarting condition's when a later attempt is
  under way (a second failure keeps the condition True, and its time).
* **nudged**: the kubelet writes the watch's volume (the annotation, and ``given``, from its own
  copy of the ConfigMap) when it syncs the pod: on any change of the pod, else once a minute. A
  copy of the ConfigMap older than the tell holds the watch back until the next sync (seen in
  CI: a restart 60 s late, past its deadline, recreated). A pod still RESTARTING
  NUDGE_SECONDS after its tell is nudged: an annotation (``nudged-at``) that has its kubelet
  sync it now; again every NUDGE_AGAIN_SECONDS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import condition, parse_time
from .inplace_fallback import rebuilt

RUNS = "runs"  # its containers run the attempt: created in it, or restarted for it
TO_TELL = "to tell"  # to be told the attempt now
WAITS = "waits"  # to be told once worker 0's trainer of an earlier attempt has ended
RESTARTING = "restarting"  # told an attempt; its kubelet has yet to restart it
HELD = "held"  # to tell once no pod of the group restarts for an earlier attempt
OUT = "out"  # not an in-place pod, or going: the group cannot restart in place with it
NUDGE_SECONDS = 5  # a kubelet restarts a told pod in 1-3 s (measured); a deaf trainer: grace
NUDGE_AGAIN_SECONDS = 20


def state(pod: WorkerPod, attempt: int, master: WorkerPod | None = None) -> str:
    """Where ``pod`` stands in ``attempt``; ``master``: worker 0's pod, if observed."""
    if not pod.in_place or pod.deleting:
        return OUT
    if pod.restart_pending:
        return RESTARTING
    if pod.attempt_now >= attempt:
        return RUNS
    if pod is not master and master is not None and _runs_old(master, attempt):
        return WAITS
    return TO_TELL


def _runs_old(master: WorkerPod, attempt: int) -> bool:
    """Whether worker 0 still runs a trainer of an attempt before ``attempt``."""
    return master.trainer_running and state(master, attempt, master) in (TO_TELL, RESTARTING)


def _master(pods: Sequence[WorkerPod]) -> WorkerPod | None:
    return next((p for p in pods if p.index == 0), None)


def restarting_before(pod: WorkerPod, attempt: int) -> bool:
    """Whether an in-place pod still restarts for an attempt before ``attempt``: told one and
    not restarted, or its containers (created, or restarted) not all started; it would read
    ``attempt`` from the ConfigMap as they start."""
    if not pod.in_place or pod.deleting or pod.phase in c.FINISHED_PHASES:
        return False
    return pod.attempt_now < attempt and (pod.restart_pending or not pod.started)


def holder(current: Iterable[WorkerPod], attempt: int) -> WorkerPod | None:
    """The first pod of the group that holds back every tell of ``attempt``, if any."""
    return next((p for p in current if restarting_before(p, attempt)), None)


def behind(pod: WorkerPod, attempt: int) -> bool:
    """Whether an in-place pod has yet to be told ``attempt`` or to restart for it."""
    return state(pod, attempt) in (TO_TELL, WAITS, RESTARTING)


def belongs(pod: WorkerPod, attempt: int, wanted: bool = True) -> bool:
    """Whether ``pod`` is in the group of ``attempt``: created for it, told it, or to be told
    it (an in-place pod still alive). An in-place pod that never ran, or whose watch cannot
    start, is not, once in-place restarts are no longer ``wanted``: it is built again without."""
    if rebuilt([pod], wanted):
        return False
    ended = pod.phase in c.FINISHED_PHASES and not pod.watching
    if pod.attempt_now == attempt:  # unless it ended before it restarted for the attempt
        return not (ended and pod.in_place and pod.restart_pending)
    return pod.in_place and pod.attempt_now < attempt and not ended and not pod.deleting


def limit(job: JobSpec) -> int:
    """Seconds a pod may take to restart in place once told: its old processes end (within the
    pods' termination grace period; worker 0's first, for a waiting pod), and a margin."""
    grace = (job.template.get("spec") or {}).get("terminationGracePeriodSeconds")
    return c.IN_PLACE_TIMEOUT_SECONDS + 2 * int(30 if grace is None else grace)


@dataclass(frozen=True)
class Standing:
    """Where one worker's pod stands in the group's attempt (``state``), and since when its
    restart's clock runs (``since``: RESTARTING, WAITS and HELD; None where no clock runs, or
    none is known); its deadline is ``limit`` seconds on."""

    pod: WorkerPod
    state: str
    since: datetime | None


def started_at(status: Mapping[str, Any], attempt: int) -> datetime | None:
    """When ``attempt`` began: the status's ``attemptStartTime``, written by the restart that
    decided it; a status written before it was kept (or whose write of ``attempt`` was lost):
    the Restarting condition's transition, if True (a second failure keeps it, and its time)."""
    if int(status.get("restarts") or 0) == attempt and (
        began := parse_time(status.get("attemptStartTime"))
    ):
        return began
    cond = condition(status.get("conditions") or [], c.COND_RESTARTING) or {}
    return parse_time(cond.get("lastTransitionTime")) if cond.get("status") == "True" else None


def standings(
    current: Iterable[WorkerPod], attempt: int, status: Mapping[str, Any]
) -> list[Standing]:
    """Each in-place pod's standing in ``attempt``. A RESTARTING pod is timed from its tell
    (one told by an operator that wrote no told-at: from the attempt's start); a WAITING or
    HELD one from when worker 0 was told this attempt, else from the attempt's start; never
    from a tell of an earlier attempt."""
    current = list(current)
    master, held = _master(current), holder(current, attempt) is not None
    began = started_at(status, attempt)
    found = []
    for pod in current:
        now_state = state(pod, attempt, master)
        if now_state == TO_TELL and held:
            now_state = HELD
        since = None
        if now_state == RESTARTING:
            since = parse_time(pod.told_at) or began
        elif now_state in (WAITS, HELD) and master is not None:
            told = master.attempt_now >= attempt  # worker 0 was told this attempt
            since = (parse_time(master.told_at) if told else None) or began
        found.append(Standing(pod, now_state, since))
    return found


def to_tell(standing: Iterable[Standing]) -> list[WorkerPod]:
    """The group's pods to tell its attempt now."""
    return [s.pod for s in standing if s.state == TO_TELL]


def _deadlines(standing: Iterable[Standing], seconds: int) -> list[tuple[Standing, datetime]]:
    return [
        (s, s.since + timedelta(seconds=seconds))
        for s in standing
        if s.since is not None and s.state in (RESTARTING, WAITS, HELD)
    ]


def stuck(standing: Sequence[Standing], attempt: int, now: datetime, seconds: int) -> list[str]:
    """Why the restart is stuck, pod by pod, past its deadline: told, but its kubelet has not
    restarted it (no RestartAllContainers, or a status that never showed it: seen once on the
    real node); or never told, worker 0's old trainer never seen ending, or a pod of the group
    never started again for an earlier attempt."""
    first = holder([s.pod for s in standing], attempt)
    found = []
    for s, due in _deadlines(standing, seconds):
        pod = s.pod
        if now < due:
            continue
        if s.state == HELD and first is not None:
            found.append(
                f"{pod.name} was not given attempt {attempt} within {seconds}s ({first.name} "
                f"never started again for attempt {first.attempt_now})"
            )
            continue
        if s.state in (WAITS, HELD):
            found.append(
                f"{pod.name} was not given attempt {attempt} within {seconds}s "
                "(worker 0's trainer of the attempt before was never seen ending)"
            )
            continue
        hint = f" (does node {pod.node} run a kubelet with RestartAllContainers?)"
        found.append(
            f"{pod.name} was not restarted in place within {seconds}s of being told attempt "
            f"{pod.attempt_now}" + (hint if pod.node else "")
        )
    return found


def _nudge_due(pod: WorkerPod) -> datetime | None:
    """When a told pod not yet restarted is to be nudged: NUDGE_SECONDS after its tell, then
    NUDGE_AGAIN_SECONDS after its last nudge."""
    told, nudged = parse_time(pod.told_at), parse_time(pod.nudged_at)
    if told is None:
        return None
    if nudged is None or nudged < told:
        return told + timedelta(seconds=NUDGE_SECONDS)
    return nudged + timedelta(seconds=NUDGE_AGAIN_SECONDS)


def to_nudge(standing: Iterable[Standing], now: datetime) -> list[WorkerPod]:
    """The pods told the attempt and not restarted since, whose nudge is due."""
    return [
        s.pod
        for s in standing
        if s.state == RESTARTING and (due := _nudge_due(s.pod)) is not None and due <= now
    ]


def recheck(standing: Sequence[Standing], now: datetime, seconds: int) -> float | None:
    """Seconds until the next deadline or nudge of a pod behind, if any (a pod to tell:
    ``seconds``)."""
    dues = [(due - now).total_seconds() for _, due in _deadlines(standing, seconds)]
    nudges = [_nudge_due(s.pod) for s in standing if s.state == RESTARTING]
    again = now + timedelta(seconds=NUDGE_AGAIN_SECONDS)  # those nudged by this pass
    dues += [((due if due > now else again) - now).total_seconds() for due in nudges if due]
    if dues:
        return max(0.0, min(dues))
    return (
        float(seconds)
        if any(s.state in (TO_TELL, WAITS, RESTARTING, HELD) for s in standing)
        else None
    )


def obstacle(
    job: JobSpec, current: Mapping[int, WorkerPod], stuck_pods: list[str], possible: bool = True
) -> str | None:
    """Why the group cannot restart in place now (None: it can): in-place restarts are wanted
    and ``possible`` on this cluster, and every worker is an in-place pod, alive and not going."""
    if job.restart_strategy != c.RESTART_IN_PLACE:
        return f"spec.restartStrategy is {job.restart_strategy}"
    if not possible:
        return f"the {c.COND_IN_PLACE} condition says why"
    if stuck_pods:
        return stuck_pods[0]
    for i in range(job.nodes):
        pod = current.get(i)
        if pod is None:
            return f"worker {i} has no pod"
        if not pod.in_place:
            return f"{pod.name} was not created to restart in place"
        if pod.deleting:
            return f"{pod.name} is being deleted"
        if pod.phase in c.FINISHED_PHASES and not pod.watching:
            return f"{pod.name} has ended ({pod.phase})"
        if pod.watch_backoff:  # killed alone (OOM, by hand): blind to its attempt for minutes
            return f"{pod.name}'s {c.WATCH_CONTAINER} container is in crash-loop back-off"
    return None
