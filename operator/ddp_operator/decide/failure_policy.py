"""What a job does about a failed attempt: its failures in (``failure_facts``, first first), one
action out. Pure; ``reconcile.plan`` calls ``decide`` once per failed attempt.

1. The first failure decides (``failure_facts.ordered``: the first in time, but never an echo
   of a cause that came within seconds of it; the others are most often its consequence:
   counted, not listed first).
2. The first rule of ``spec.failurePolicy.rules`` it matches gives the action; every matcher
   a rule has must match (exit code In/NotIn, reason, pod condition, message pattern: RE2,
   searched in the deciding rank's block, ``LastWords.block``: its log's, where the job loop
   read it because its termination message held no exception, ``failure_logs``).
3. With no rule matching, the default: an elastic job's worker is replaced alone
   (``ReplaceWorker``); a disruption (eviction, preemption, drain, lost node: the pod's
   ``DisruptionTarget`` condition or reason) restarts the group without counting; anything
   else restarts the group counted against ``backoffLimit``.
4. The action is applied by its function in ``APPLY`` (the table below): each checks its own
   bound and, past it, hands over to the next (a replacement to the group's default, an
   uncounted restart to a counted one, a counted restart past ``backoffLimit`` to failing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..model import failure_policy as fp
from ..model.jobspec import JobSpec
from .failure_facts import WorkerFailure

DEFAULT = "default"  # the rule name of the default actions


@dataclass(frozen=True)
class Counts:
    """The job's counters so far, from its status."""

    counted: int = 0  # group restarts counted against backoffLimit
    uncounted: int = 0  # group restarts not counted (disruptions, rules)
    replacements: int = 0  # elastic workers replaced alone

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> Counts:
        """A status written before the counters existed counted every restart."""
        restarts = int(status.get("restarts") or 0)
        uncounted = int(status.get("uncountedRestarts") or 0)
        counted = status.get("countedRestarts")
        return cls(
            counted=restarts - uncounted if counted is None else int(counted),
            uncounted=uncounted,
            replacements=int(status.get("replacements") or 0),
        )


@dataclass(frozen=True)
class Bound:
    """A limit the action was held to: the spec field, the count it makes (within) or made
    (past it), the limit, and whether the action stays within it. ``field`` empty: no limit (a
    rule's FailJob). ``ended_at`` and ``beyond``: where restarts without progress ended, and the
    step or checkpoint none passed (``goodput.bound``)."""

    field: str
    count: int = 0
    limit: int = 0
    within: bool = True
    ended_at: tuple[int, ...] = ()
    beyond: str = ""


@dataclass(frozen=True)
class Handover:
    """An action the verdict could not take, handed over to the next (``APPLY``): ``how`` it
    was taken instead (``counted``, ``not alone``) and why."""

    how: str
    why: str


@dataclass(frozen=True)
class Verdict:
    """The action taken (``fp.ACTIONS``), the ``rule`` that asked for the action ``asked`` (or
    the default), its ``first`` failure and the ``collateral`` ones, the ``bound`` it was held to
    and the ``handovers`` on the way, most recent first; ``reason`` is the Failed condition's
    when it fails the job. Data: ``cause``, ``count`` and ``message`` render it for people."""

    action: str
    first: WorkerFailure
    rule: str
    collateral: int
    asked: str = ""
    bound: Bound = Bound("")
    handovers: tuple[Handover, ...] = ()
    reason: str = ""

    @property
    def cause(self) -> str:
        """The first failure, how many followed it, and the rule that matched it."""
        cause = self.first.describe()
        if self.collateral:
            cause += f"; {self.collateral} other worker{'s' if self.collateral > 1 else ''}"
            cause += " failed after it"
        if self.rule != DEFAULT:
            cause += f" (failurePolicy rule {self.rule}: {self.asked})"
        return cause

    @property
    def count(self) -> str:
        """What the action costs against its bound, then the handovers."""
        b, field = self.bound, self.bound.field
        if not field:
            said = f"failurePolicy rule {self.rule} says FailJob" if self.rule != DEFAULT else ""
        elif field == "backoffLimit" and b.within:
            said = f"restart {b.count} of backoffLimit {b.limit}"
        elif field == "backoffLimit":
            said = f"the group was restarted {b.count} times (backoffLimit {b.limit})"
        elif field == "maxUncountedRestarts":
            why = "a disruption" if self.first.disruption and self.rule == DEFAULT else None
            said = f"not counted ({why or f'rule {self.rule}'}; {b.count} of {b.limit})"
        elif field == "maxReplacements":
            said = f"replacement {b.count} of at most {b.limit}"
        else:  # maxRestartsWithoutProgress
            steps = ", ".join(map(str, b.ended_at))
            said = (
                f"{b.count} restarts in a row made no progress past {b.beyond}; they ended at "
                f"steps {steps} ({field} {b.limit})"
            )
        return said + "".join(f"; {h.how}: {h.why}" for h in self.handovers)

    @property
    def message(self) -> str:
        return f"{self.cause}; {self.count}"


def _matches(rule: fp.Rule, failure: WorkerFailure) -> bool:
    if rule.exit_codes is not None:
        operator, codes = rule.exit_codes
        if failure.exit_code is None or (failure.exit_code in codes) != (operator == "In"):
            return False
    if rule.reasons is not None and failure.reason not in rule.reasons:
        return False
    if rule.pod_conditions is not None and not any(
        kind == have and reason in (None, why)
        for kind, reason in rule.pod_conditions
        for have, why in failure.conditions
    ):
        return False
    pattern = rule.message_pattern  # RE2, on the deciding rank's block, not every rank's tail
    return pattern is None or bool(pattern.search(failure.words.block))


def action_for(job: JobSpec, failure: WorkerFailure) -> tuple[str, str]:
    """(rule name, action): the first rule matching ``failure``, else the default."""
    for rule in job.failure_policy.rules:
        if _matches(rule, failure):
            return rule.name, rule.action
    if job.scalable and failure.index > 0:
        return DEFAULT, fp.REPLACE_WORKER
    return DEFAULT, _group_default(failure)


def _group_default(failure: WorkerFailure) -> str:
    return fp.RESTART_GROUP_NOT_COUNTED if failure.disruption else fp.RESTART_GROUP


Apply = Callable[[JobSpec, Verdict, Counts, str | None], Verdict]


def _fail(job: JobSpec, v: Verdict, counts: Counts, alone: str | None) -> Verdict:
    return replace(v, reason="FailedByPolicy", bound=Bound(""))


def _restart(job: JobSpec, v: Verdict, counts: Counts, alone: str | None) -> Verdict:
    limit = job.backoff_limit
    if counts.counted >= limit:
        past = Bound("backoffLimit", counts.counted, limit, within=False)
        return replace(v, action=fp.FAIL_JOB, reason="BackoffLimitExceeded", bound=past)
    return replace(v, bound=Bound("backoffLimit", counts.counted + 1, limit))


def _restart_uncounted(job: JobSpec, v: Verdict, counts: Counts, alone: str | None) -> Verdict:
    most = job.failure_policy.max_uncounted_restarts
    if counts.uncounted >= most:
        past = Handover("counted", f"past maxUncountedRestarts ({most})")
        counted = replace(v, action=fp.RESTART_GROUP, handovers=(past, *v.handovers))
        return _restart(job, counted, counts, alone)
    return replace(v, bound=Bound("maxUncountedRestarts", counts.uncounted + 1, most))


def _replace_worker(job: JobSpec, v: Verdict, counts: Counts, alone: str | None) -> Verdict:
    most = job.failure_policy.max_replacements
    if alone is None and counts.replacements >= most:
        alone = f"maxReplacements ({most}) reached"
    if alone is not None:
        action = _group_default(v.first)
        handed = replace(v, action=action, handovers=(Handover("not alone", alone),))
        return APPLY[action](job, handed, counts, None)
    return replace(v, bound=Bound("maxReplacements", counts.replacements + 1, most))


# What each action does: the one table from a rule's action to its effect.
APPLY: dict[str, Apply] = {
    fp.FAIL_JOB: _fail,
    fp.RESTART_GROUP: _restart,
    fp.RESTART_GROUP_NOT_COUNTED: _restart_uncounted,
    fp.REPLACE_WORKER: _replace_worker,
}


def decide(
    job: JobSpec, failures: list[WorkerFailure], counts: Counts, alone: str | None
) -> Verdict:
    """The action for an attempt's ``failures`` (non-empty, first first). ``alone``: why its
    failed workers cannot be replaced alone (None: they can, an elastic job's)."""
    first = failures[0]
    rule, action = action_for(job, first)
    if action == fp.REPLACE_WORKER and first.index < 0:
        alone = f"{first.reason} is no one worker's failure"
    elif action == fp.REPLACE_WORKER and alone is None:
        others = [f for f in failures[1:] if action_for(job, f)[1] != fp.REPLACE_WORKER]
        alone = f"{others[0].pod} is not to be replaced alone" if others else None
        workers, most = len({f.index for f in failures}), job.failure_policy.max_replacements
        if alone is None and workers > 1 and counts.replacements + workers > most:  # all or none
            done = f"{counts.replacements} replaced, {workers} more"
            alone = f"maxReplacements ({most}) reached: {done}"
    verdict = Verdict(action, first, rule, len(failures) - 1, asked=action)
    return APPLY[action](job, verdict, counts, alone)


def record(new: dict[str, Any], verdict: Verdict, attempt: int, in_place: bool) -> None:
    """Count the verdict in the status being written (``new``) and name its first failure."""
    counts = Counts.of(new)
    if verdict.action in (fp.RESTART_GROUP, fp.RESTART_GROUP_NOT_COUNTED):
        new["restarts"] = attempt + 1
        counted = verdict.action == fp.RESTART_GROUP
        new["countedRestarts"] = counts.counted + counted
        new["uncountedRestarts"] = counts.uncounted + (not counted)
        new["inPlaceRestarts"] = int(new.get("inPlaceRestarts") or 0) + in_place
    first, words = verdict.first, verdict.first.words
    entry = {
        "attempt": attempt,
        "worker": first.index if first.index >= 0 else None,
        "pod": first.pod or None,
        "node": first.node,
        "rank": words.rank,
        "localRank": words.local_rank,
        "exitCode": first.exit_code,
        "signal": first.signal,
        "reason": first.reason,
        "message": words.lines[:1024] or first.message[-1024:] or None,
        "summary": words.summary or None,
        "collective": words.collective.op,
        "collectiveSeqNum": words.collective.seq,
        "collectiveLine": words.collective.line,
        "source": first.source,
        "logError": first.log.error if first.log is not None and first.log.error else None,
        "time": first.time,
        "action": verdict.action,
        "rule": verdict.rule,
        "collateral": verdict.collateral,
    }
    new["firstFailure"] = {k: v for k, v in entry.items() if v is not None}
