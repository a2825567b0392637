"""The reconcile decision, pure: a job, its status and its observed pods in; a Plan out.

The job loops (``runner``) execute a Plan and call ``plan`` again on the next change. Every
decision is derived from what is observed, so a restarted operator converges from any point.
``plan`` runs the numbered steps of ``reconcile_steps`` in order, the first to end the pass
giving its Plan.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import failure_logs, kueue, kueue_workload
from .conditions import WARNING, Conditions, format_time
from .failures import Failure
from .plan import Plan
from .reconcile_steps import Beside, Pass, phase


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
    stacks: Mapping[int, Mapping[str, Any]] = MappingProxyType({}),
    broken: Mapping[str, str] = MappingProxyType({}),
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
    log read says so, with those of the failures that may be its cause: ``Plan.read_logs``);
    ``stacks``: where the quiet ranks of the attempt stand, by rank (``culprit``); ``broken``:
    the nodes marked broken now, and why (``exclusion``: new pods keep off them)."""
    beside = Beside(
        failure, seen, evicted, told, refused, last, progress, admission, logs, stacks, broken
    )
    one = Pass(job, status, list(pods), now, generation, beside)
    steps = (
        one.finished,  # 1. a finished job only cleans up
        one.refused_for_good,  # 2. a template the API server refuses
        one.suspended,  # 3. suspended, or held by Kueue; resumed
        one.past_deadline,  # 4. activeDeadlineSeconds
        one.evicted,  # 5. evicted by Kueue: no failure
        one.outcome,  # 6. succeeded, or failed: the verdict written to the status
        one.converge,  # 7. the pods: delete the stale, tell those behind, create the missing
    )
    for step in steps:
        if (done := step()) is not None:
            return done
    return one.report()  # 8. what keeps workers from starting; Running


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
    return Plan(status={"conditions": conds.items, "phase": phase(conds)}, events=conds.events)
