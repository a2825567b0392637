"""The numbered steps of one reconcile pass (``reconcile.plan`` runs them in order). Pure.

Each step either ends the pass with a Plan or lets the next one run; none both decides and acts
on the pods: a restart or a replacement only writes the status (``recovery``), and the last
step converges on the group that status asks for (``group``). Kueue's jobframework has this
shape: numbered steps, each returning one decision.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..manifests.builders import worker_name
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import (
    bad_nodes,
    creation,
    echo_hold,
    elastic,
    exclusion,
    failure_facts,
    failure_logs,
    failure_policy,
    goodput,
    group,
    inplace,
    inplace_fallback,
    kueue,
    kueue_workload,
    obstacles,
    outcomes,
    quiet,
    recovery,
    startup,
)
from .conditions import NORMAL, WARNING, Conditions, condition, format_time, parse_time
from .endings import finished
from .failures import Failure
from .plan import Plan

STATUS_PHASES = (
    (c.COND_FAILED, "Failed"),
    (c.COND_SUCCEEDED, "Succeeded"),
    (c.COND_SUSPENDED, "Suspended"),
    (c.COND_RESTARTING, "Restarting"),
    (c.COND_RUNNING, "Running"),
)


def phase(conds: Conditions) -> str:
    """The job's phase: its first True condition of STATUS_PHASES, else Pending."""
    return next((p for type_, p in STATUS_PHASES if conds.true(type_)), "Pending")


def counts(pods: Collection[WorkerPod]) -> dict[str, int]:
    """``status.workers``: the group's pods by phase."""
    found = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in pods:
        key = pod.phase.lower()
        if key in found:
            found[key] += 1
    return found


@dataclass(frozen=True)
class Beside:
    """What the loop saw beside the job and its pods (``reconcile.plan`` says each)."""

    failure: Failure | None
    seen: Collection[tuple[str, int]]
    evicted: Mapping[tuple[str, int], str]
    told: kueue.Holdup | None
    refused: str | None
    last: Mapping[tuple[str, int], WorkerPod]
    progress: Mapping[str, Any] | None
    admission: kueue_workload.Admission | None
    logs: Mapping[tuple[str, int], failure_logs.LogRead]
    stacks: Mapping[int, Mapping[str, Any]]
    broken: Mapping[str, str]  # the nodes marked broken now: why (``model/node_health``)


class Pass:
    """One pass over a job: the status it writes (``new``, ``conds``), the group it works on
    (``members``) and the Plan it fills (``result``)."""

    def __init__(
        self,
        job: JobSpec,
        status: Mapping[str, Any],
        observed: list[WorkerPod],
        now: datetime,
        generation: int,
        beside: Beside,
    ) -> None:
        self.job, self.status, self.now, self.beside = job, status, now, beside
        self.observed = observed
        self.pods, self.foreign = obstacles.split(job, observed)
        self.conds = Conditions(status.get("conditions") or [], now, generation)
        if beside.refused:
            self.conds.set(c.COND_IN_PLACE, False, "InPlaceUnsupported", beside.refused, WARNING)
        self.in_place = inplace_fallback.settle(self.conds, job, self.pods)
        self.members = group.of(job, status, self.pods, self.in_place)
        self.restarted = False
        current = self.members.current
        self.new: dict[str, Any] = {
            "restarts": self.members.attempt,
            "createdInAttempt": self.members.created_in,
            "attemptStartTime": status.get("attemptStartTime"),
            "observedGeneration": generation,
            "startTime": status.get("startTime"),
            "completionTime": status.get("completionTime"),
            "workers": counts([p for p in current.values() if not p.deleting]),
            "worldSize": 0,
            "replacements": int(status.get("replacements") or 0),
            "countedRestarts": failure_policy.Counts.of(status).counted,
            "uncountedRestarts": int(status.get("uncountedRestarts") or 0),
            "inPlaceRestarts": int(status.get("inPlaceRestarts") or 0),
            "firstFailure": status.get("firstFailure"),
            "replacing": elastic.record(self.members.replacing),
            "excludedNodes": status.get("excludedNodes"),
        }
        self.result = Plan(status=self.new, own=self.pods, in_place=self.in_place)
        # What blocks the job, most recent first: (reason, message).
        self.blockers: list[tuple[str, str]] = []
        if beside.failure is not None:
            self.blockers.append((beside.failure.reason, beside.failure.message))

    @property
    def attempt(self) -> int:
        return self.members.attempt

    def finish(self, active: bool = True) -> Plan:
        """The Plan as it stands, with its status's conditions and phase."""
        result, conds = self.result, self.conds
        result.force_delete = obstacles.force_delete(self.pods, self.now)
        result.release = kueue.release(self.pods)
        if active:
            result.recheck_in(obstacles.report(conds, self.pods, self.now, self.blockers))
        self.new["conditions"] = conds.items
        self.new["phase"] = phase(conds)
        result.events = conds.events
        return result

    def stop(self, succeeded: bool, reason: str, message: str) -> Plan:
        """The job ends: Succeeded or Failed, for ``reason``."""
        conds = self.conds
        if succeeded:
            conds.set(c.COND_SUCCEEDED, True, reason, message, NORMAL)
        else:
            conds.set(c.COND_FAILED, True, reason, message, WARNING)
        conds.set(c.COND_RUNNING, False, reason, "the job has finished")
        for type_ in (c.COND_RESTARTING, c.COND_BLOCKED, c.COND_NOT_STARTING):
            conds.clear(type_, reason, "the job has finished")
        self.new["completionTime"] = format_time(self.now)
        goodput.settle(self.new, self.status, self.beside.progress, self.now)
        return finished(self.job, self.pods, self.now, self.new, self.finish(active=False))

    # 1. A finished job only cleans up and waits for its TTL.
    def finished(self) -> Plan | None:
        if self.conds.true(c.COND_SUCCEEDED) or self.conds.true(c.COND_FAILED):
            return finished(self.job, self.pods, self.now, self.new, self.finish(active=False))
        return None

    # 2. A permanent failure (a template the API server refuses) fails the job at once.
    def refused_for_good(self) -> Plan | None:
        failure = self.beside.failure
        if failure is not None and failure.permanent:
            return self.stop(False, failure.reason, failure.message)
        return None

    # 3. Suspended (or held by its Kueue Workload): no pods; resuming restarts the clock, as for
    #    a Job.
    def suspended(self) -> Plan | None:
        conds, admission = self.conds, self.beside.admission
        if self.job.suspend:
            reason, why = "Suspended", "the job is suspended"
            if admission is not None and not admission.admitted:
                reason, why = kueue_workload.held(conds, admission)
                self.result.recheck_in(kueue_workload.RECHECK)
            conds.set(c.COND_SUSPENDED, True, reason, why, NORMAL)
            conds.clear(c.COND_RUNNING, reason, why)
            conds.clear(c.COND_CREATED, reason, why)
            self.result.delete = [p for p in self.pods if not p.deleting]
            return self.finish()
        was = condition(conds.items, c.COND_SUSPENDED) or {}
        if conds.true(c.COND_SUSPENDED) or was.get("reason") == "Resuming":
            # The suspended group's pods go first: their ending is no failure, nor a restart.
            if leaving := [p for p in self.pods if p.deleting]:
                why = f"the job was resumed; {len(leaving)} pods of the suspended group still going"
                conds.set(c.COND_SUSPENDED, False, "Resuming", why, NORMAL)
                return self.finish()
            conds.set(c.COND_SUSPENDED, False, "Resumed", "the job was resumed", NORMAL)
            self.new["startTime"] = None
        return None

    # 4. Deadline.
    def past_deadline(self) -> Plan | None:
        seconds, start = self.job.active_deadline_seconds, parse_time(self.new["startTime"])
        if seconds is None or start is None:
            return None
        left = start + timedelta(seconds=seconds) - self.now
        if left <= timedelta(0):
            why = f"the job was active longer than activeDeadlineSeconds ({seconds}s)"
            return self.stop(False, "DeadlineExceeded", why)
        self.result.requeue_after = left.total_seconds()
        return None

    # 5. Kueue evicted the group: no failure and no restart; recreated once it is gone.
    def evicted(self) -> Plan | None:
        current = self.members.current
        why = kueue.eviction(current, self.beside.evicted, self.attempt) if self.job.queue else None
        if why:
            self.result.delete = kueue.evict(self.conds, current, why)
            if current:
                return self.finish()
        return None

    # 6. Success, then failure: the failures as facts (``failure_facts``), what they mean for the
    #    job (``failure_policy``), what it does (``recovery``: only the status changes).
    def outcome(self) -> Plan | None:
        job, beside, new, attempt = self.job, self.beside, self.new, self.attempt
        current = self.members.current
        reason = outcomes.succeeded(job, current, attempt)
        if reason:
            what = "all workers" if reason == "AllWorkersSucceeded" else "worker 0"
            return self.stop(True, reason, f"{what} exited 0 (after {attempt} restarts)")
        replacing = self.members.replacing
        excused = {*kueue.not_failures(beside.evicted, attempt)}
        excused |= {(worker_name(job, i), attempt) for i in replacing}
        excused |= {(p.name, attempt) for p in inplace_fallback.rebuilt(self.pods, self.in_place)}
        # An elastic job's Created counts workers before spec.nodes changed: only those seen
        # vanish.
        created = self.conds.true(c.COND_CREATED) and not job.scalable
        facts = failure_facts.collect(
            job, current, created, beside.seen, attempt, excused, beside.last, beside.logs
        )
        if (hold := echo_hold.wait(facts, current, attempt, self.now)) is not None:
            self.result.recheck_in(hold)  # its cause may still fail (``echo_hold``)
            return None
        stuck = inplace.stuck(self.members.standing, attempt, self.now, inplace.limit(job))
        if not facts and not stuck:  # a training that stopped fails too (``hangs``, ``quiet``)
            status = {**new, "conditions": self.conds.items}
            stall, until = quiet.stalled(
                job, status, current, beside.progress, beside.stacks, attempt, self.now
            )
            self.result.recheck_in(until)
            facts = [stall] if stall else []
        if not facts and not stuck:
            return None
        failed = [f.index for f in facts]
        alone = elastic.not_alone(job, failed, current, stuck)
        facts += failure_facts.stuck(stuck)
        verdict = failure_policy.decide(job, facts, failure_policy.Counts.of(new), alone)
        self.result.read_logs = failure_facts.to_read(facts, attempt)  # read, then planned again
        ended = goodput.account(self.status, beside.progress, attempt, verdict, self.now)
        verdict = goodput.bound(job, verdict, ended)
        # Its node blamed and kept out (``bad_nodes``): the worker that moves off it, if any.
        judged = bad_nodes.judge(
            job, verdict, self.conds, new, self.status, current, beside.broken, attempt,
            self.result.node_events,
        )  # fmt: skip
        response = recovery.respond(
            job, verdict, self.conds, new, attempt, current, failed, replacing, stuck,
            self.in_place, judged.move,
        )  # fmt: skip
        bad_nodes.note(new, judged)
        goodput.record(new, ended)  # what the attempt cost
        if response.fails:
            return self.stop(False, verdict.reason, verdict.message)
        # The status now says the new attempt, or the replacements: its group is converged on.
        self.members = group.of(
            job, {**new, "conditions": self.conds.items}, self.pods, self.in_place
        )
        self.restarted = response.restarts
        new["workers"] = counts([p for p in self.members.current.values() if not p.deleting])
        return None

    # 7. Converge on the group the status asks for (``group``): remove the pods not of it, tell
    #    its attempt to in-place pods behind (``inplace``), create what is missing
    #    (``creation``).
    def converge(self) -> Plan | None:
        job, result, attempt, now = self.job, self.result, self.attempt, self.now
        current, stale = self.members.current, self.members.stale
        result.delete = [p for p in stale if not p.deleting]
        standing = self.members.standing
        result.tell = inplace.to_tell(standing)
        result.nudge = inplace.to_nudge(standing, now)
        result.recheck_in(inplace.recheck(standing, now, inplace.limit(job)))
        missing = creation.missing(job, current)
        replacing = self.members.replacing
        result.create = creation.to_create(job, missing, stale, self.observed, attempt, replacing)
        result.avoid = exclusion.avoid(self.new, self.beside.broken)  # new pods keep off them
        if conflict := obstacles.conflict(job, [p for p in self.foreign if p.name in missing]):
            self.blockers.append(conflict)
        if self.restarted:  # what keeps the new attempt's workers from starting: next passes
            return self.finish()
        # Set by the pass that creates the pods, or that first sees them (its status is written
        # once the watch shows them: that pass, or an operator that took over, may be the first).
        if (result.create or current) and self.new["startTime"] is None:
            self.new["startTime"] = format_time(now)
            if job.active_deadline_seconds is not None:
                result.requeue_after = float(job.active_deadline_seconds)
        return None

    # 8. What keeps workers from starting, in the scheduler's, Kueue's and the kubelet's words;
    #    Running once every worker has started (finished ones count), or for an elastic job
    #    enough of them (``startup.running``, which gives the live world size).
    def report(self) -> Plan:
        job, conds, new, attempt = self.job, self.conds, self.new, self.attempt
        live = [p for p in self.members.current.values() if not p.deleting]
        creation.report(conds, job, live, self.members.stale, attempt)
        startup.report(conds, live, job.nodes, job.gang)
        exclusion.report(conds, live, new)
        self.result.recheck_in(kueue.report(conds, live, job, self.beside.told))
        self.result.recheck_in(kueue_workload.report(conds, self.beside.admission))
        new["worldSize"] = startup.running(conds, job, live, attempt, new["workers"]["running"])
        progress = self.beside.progress
        goodput.begin(new, self.status, progress)  # the account opens at the first report
        goodput.recovered(new, self.status, conds.items, progress, attempt)  # the last failure
        return self.finish()
