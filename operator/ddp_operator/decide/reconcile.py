"""The reconcile decision, pure: a job, its status and its observed pods in; a Plan out.

The job loops (``runner``) execute a Plan and call ``plan`` again on the next change. Every
decision is derived from what is observed, so a restarted operator converges from any point.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from ..manifests.builders import worker_name
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import (
    creation,
    elastic,
    failure_facts,
    failure_logs,
    failure_policy,
    goodput,
    group,
    hangs,
    inplace,
    inplace_fallback,
    kueue,
    kueue_workload,
    obstacles,
    outcomes,
    recovery,
    startup,
)
from .conditions import (
    NORMAL,
    WARNING,
    Conditions,
    condition,
    format_time,
    parse_time,
)
from .endings import finished
from .failures import Failure
from .plan import Plan


def _counts(pods: Iterable[WorkerPod]) -> dict[str, int]:
    counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in pods:
        key = pod.phase.lower()
        if key in counts:
            counts[key] += 1
    return counts


def plan(
    job: JobSpec,
    status: Mapping[str, Any],
    pods: Iterable[WorkerPod],
    now: datetime,
    generation: int = 0,
    failure: Failure | None = None,
    seen: Collection[tuple[str, int]] = (),
    evicted: Mapping[tuple[str, int], str] = MappingProxyType({}),
    told: kueue.Holdup | None = None,
    refused: str | None = None,
    last: Mapping[tuple[str, int], WorkerPod] = MappingProxyType({}),
    progress: Mapping[str, Any] | None = None,
    admission: kueue_workload.Admission | None = None,
    logs: Mapping[tuple[str, int], failure_logs.LogRead] = MappingProxyType({}),
) -> Plan:
    """Decide the next status and actions of a job from what is observed: its status, the pods
    carrying its label (only those it controls count as its own), the (name, attempt) of its own
    pods seen before (a worker's pod seen once and gone is a failure, never re-created in the
    same attempt), those Kueue removed (``evicted``: why), why Kueue holds the group (``told``,
    from its Workload), why the API server refused in-place pods (``refused``) and, if the last
    attempt to act failed, that failure; ``last``: own pods gone, as last seen; ``progress``:
    the training's latest report (``status.progress``); ``admission``: what the job's own
    Kueue Workload says (``kueue_workload``: a job not admitted comes suspended); ``logs``:
    the failures' logs read, by (pod UID, attempt) (a plan whose deciding failure wants its
    log read says so: ``Plan.read_log``)."""
    observed = list(pods)
    pods, foreign = obstacles.split(job, observed)
    conds = Conditions(status.get("conditions") or [], now, generation)
    if refused:
        conds.set(c.COND_IN_PLACE, False, "InPlaceUnsupported", refused, WARNING)
    in_place = inplace_fallback.settle(conds, job, pods)
    members = group.of(job, status, pods, in_place)
    attempt, current, replacing = members.attempt, members.current, members.replacing
    new: dict[str, Any] = {
        "restarts": attempt,
        "createdInAttempt": members.created_in,
        "observedGeneration": generation,
        "startTime": status.get("startTime"),
        "completionTime": status.get("completionTime"),
        "workers": _counts(p for p in current.values() if not p.deleting),
        "worldSize": 0,
        "replacements": int(status.get("replacements") or 0),
        "countedRestarts": failure_policy.Counts.of(status).counted,
        "uncountedRestarts": int(status.get("uncountedRestarts") or 0),
        "inPlaceRestarts": int(status.get("inPlaceRestarts") or 0),
        "firstFailure": status.get("firstFailure"),
        "replacing": elastic.record(replacing),
    }
    result = Plan(status=new, own=pods, in_place=in_place)
    # What blocks the job, most recent first: (reason, message).
    blockers: list[tuple[str, str]] = []
    if failure is not None:
        blockers.append((failure.reason, failure.message))

    def finish(result: Plan, active: bool = True) -> Plan:
        result.force_delete = obstacles.force_delete(pods, now)
        result.release = kueue.release(pods)
        if active:
            result.recheck_in(obstacles.report(conds, pods, now, blockers))
        new["conditions"] = conds.items
        new["phase"] = _phase(conds)
        result.events = conds.events
        return result

    def stop(succeeded: bool, reason: str, message: str) -> Plan:
        if succeeded:
            conds.set(c.COND_SUCCEEDED, True, reason, message, NORMAL)
        else:
            conds.set(c.COND_FAILED, True, reason, message, WARNING)
        conds.set(c.COND_RUNNING, False, reason, "the job has finished")
        conds.clear(c.COND_RESTARTING, reason, "the job has finished")
        conds.clear(c.COND_BLOCKED, reason, "the job has finished")
        conds.clear(c.COND_NOT_STARTING, reason, "the job has finished")
        new["completionTime"] = format_time(now)
        goodput.settle(new, status, progress, now)
        return finished(job, pods, now, new, finish(result, active=False))

    # 1. A finished job only cleans up and waits for its TTL.
    if conds.true(c.COND_SUCCEEDED) or conds.true(c.COND_FAILED):
        return finished(job, pods, now, new, finish(result, active=False))

    # 2. A permanent failure (a template the API server refuses) fails the job at once.
    if failure is not None and failure.permanent:
        return stop(False, failure.reason, failure.message)

    # 3. Suspended (or held by its Kueue Workload): no pods; resuming restarts the clock, as
    #    for a Job.
    if job.suspend:
        reason, why = "Suspended", "the job is suspended"
        if admission is not None and not admission.admitted:
            reason, why = kueue_workload.held(conds, admission)
            result.recheck_in(kueue_workload.RECHECK)
        conds.set(c.COND_SUSPENDED, True, reason, why, NORMAL)
        conds.clear(c.COND_RUNNING, reason, why)
        conds.clear(c.COND_CREATED, reason, why)
        result.delete = [p for p in pods if not p.deleting]
        return finish(result)
    suspended = condition(conds.items, c.COND_SUSPENDED) or {}
    if conds.true(c.COND_SUSPENDED) or suspended.get("reason") == "Resuming":
        # The suspended group's pods go first: their ending is no failure, nor a restart.
        if leaving := [p for p in pods if p.deleting]:
            why = f"the job was resumed; {len(leaving)} pods of the suspended group still going"
            conds.set(c.COND_SUSPENDED, False, "Resuming", why, NORMAL)
            return finish(result)
        conds.set(c.COND_SUSPENDED, False, "Resumed", "the job was resumed", NORMAL)
        new["startTime"] = None

    # 4. Deadline.
    start = parse_time(new["startTime"])
    if job.active_deadline_seconds is not None and start is not None:
        left = start + timedelta(seconds=job.active_deadline_seconds) - now
        if left <= timedelta(0):
            return stop(
                False,
                "DeadlineExceeded",
                f"the job was active longer than activeDeadlineSeconds "
                f"({job.active_deadline_seconds}s)",
            )
        result.requeue_after = left.total_seconds()

    # 5. Kueue evicted the group: no failure and no restart; recreated once it is gone.
    why = kueue.eviction(current, evicted, attempt) if job.queue else None
    if why:
        result.delete = kueue.evict(conds, current, why)
        if current:
            return finish(result)

    # 6. Success, then failure: the failures as facts (``failure_facts``), what they mean for
    #    the job (``failure_policy``), how the group restarts (``recovery``).
    reason = outcomes.succeeded(job, current, attempt)
    if reason:
        what = "all workers" if reason == "AllWorkersSucceeded" else "worker 0"
        return stop(True, reason, f"{what} exited 0 (after {attempt} restarts)")
    excused = {*kueue.not_failures(evicted, attempt)}
    excused |= {(worker_name(job, i), attempt) for i in replacing}
    excused |= {(p.name, attempt) for p in inplace_fallback.rebuilt(pods, in_place)}
    # An elastic job's Created counts workers before spec.nodes changed: only those seen vanish.
    created = conds.true(c.COND_CREATED) and not job.scalable
    facts = failure_facts.collect(job, current, created, seen, attempt, excused, last, logs)
    stuck = inplace.stuck(current.values(), attempt, status, now, inplace.limit(job))
    if not facts and not stuck:  # a training that stopped advancing fails too (``hangs``)
        stall, until = hangs.check(job, {**new, "conditions": conds.items}, progress, attempt, now)
        result.recheck_in(until)
        facts = [stall] if stall else []
    restarted = False
    if facts or stuck:
        failed = [f.index for f in facts]
        alone = elastic.not_alone(job, failed, current, stuck)
        facts += failure_facts.stuck(stuck)
        verdict = failure_policy.decide(job, facts, failure_policy.Counts.of(new), alone)
        result.read_log = verdict.first.ask(attempt)  # the runner reads it, then plans again
        ended = goodput.account(status, progress, attempt, verdict, now)  # what it cost
        verdict = goodput.bound(job, verdict, ended)
        response = recovery.respond(
            job, verdict, conds, new, attempt, current, failed, replacing, stuck, in_place
        )
        goodput.record(new, ended)
        if response.fails:
            return stop(False, verdict.reason, verdict.message)
        # The status now says the new attempt, or the replacements: its group is converged on.
        members, restarted = group.of(job, new, pods, in_place), response.restarts
        attempt, current = members.attempt, members.current
        new["workers"] = _counts(p for p in current.values() if not p.deleting)

    # 7. Converge on the group the status asks for (``group``): remove the pods not of it,
    #    tell its attempt to in-place pods behind (``inplace``), create what is missing
    #    (``creation``).
    stale = members.stale
    result.delete = [p for p in stale if not p.deleting]
    result.tell = inplace.to_tell(current.values(), attempt)
    result.nudge = inplace.to_nudge(current.values(), attempt, now)
    result.recheck_in(inplace.recheck(current.values(), attempt, status, now, inplace.limit(job)))
    missing = creation.missing(job, current)
    result.create = creation.to_create(job, missing, stale, observed, attempt, members.replacing)
    if conflict := obstacles.conflict(job, [p for p in foreign if p.name in missing]):
        blockers.append(conflict)
    if restarted:  # what keeps the new attempt's workers from starting: on the next passes
        return finish(result)
    # Set by the pass that creates the pods, or that first sees them (its status is written
    # once the watch shows them: that pass, or an operator that took over, may be the first).
    if (result.create or current) and new["startTime"] is None:
        new["startTime"] = format_time(now)
        if job.active_deadline_seconds is not None:
            result.requeue_after = float(job.active_deadline_seconds)
    live = [p for p in current.values() if not p.deleting]
    creation.report(conds, job, live, stale, attempt)

    # 8. What keeps workers from starting, in the scheduler's, Kueue's and the kubelet's words.
    startup.report(conds, live, job.nodes, job.gang)
    result.recheck_in(kueue.report(conds, live, job, told))
    kueue_workload.report(conds, admission)

    # 9. Running once every worker has started (finished ones count), or for an elastic job
    #    enough of them: ``startup.running``, which gives the live world size.
    new["worldSize"] = startup.running(conds, job, live, attempt, new["workers"]["running"])
    goodput.begin(new, status, progress)  # the account opens at the first report
    goodput.recovered(new, status, conds.items, progress, attempt)  # the last failure's time
    return finish(result)


def rejected(
    status: Mapping[str, Any], failure: Failure, now: datetime, generation: int = 0
) -> Plan:
    """The status of a job whose spec cannot even be resolved: Failed, saying why."""
    conds = Conditions(status.get("conditions") or [], now, generation)
    conds.set(c.COND_FAILED, True, failure.reason, failure.message, WARNING)
    new = {"phase": "Failed", "conditions": conds.items, "observedGeneration": generation}
    new["completionTime"] = status.get("completionTime") or format_time(now)
    return Plan(status=new, events=conds.events)


def blocked(
    status: Mapping[str, Any], failure: Failure, now: datetime, generation: int = 0
) -> Plan:
    """The status of a job that cannot be planned (its pods cannot be seen): Blocked, saying
    why, and nothing else changed; a finished job stays as it is."""
    conds = Conditions(status.get("conditions") or [], now, generation)
    if conds.true(c.COND_SUCCEEDED) or conds.true(c.COND_FAILED):
        return Plan(status={})
    conds.set(c.COND_BLOCKED, True, failure.reason, failure.message, WARNING)
    return Plan(status={"conditions": conds.items, "phase": _phase(conds)}, events=conds.events)


def _phase(conds: Conditions) -> str:
    for type_, phase in (
        (c.COND_FAILED, "Failed"),
        (c.COND_SUCCEEDED, "Succeeded"),
        (c.COND_SUSPENDED, "Suspended"),
        (c.COND_RESTARTING, "Restarting"),
        (c.COND_RUNNING, "Running"),
    ):
        if conds.true(type_):
            return phase
    return "Pending"
