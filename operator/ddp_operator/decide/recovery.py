"""What the job does about an attempt's failures, once ``failure_policy`` gave its verdict:
fail, replace the failed workers alone (``elastic``), or restart the group, in place where it
can (``IN_PLACE``: the same pods restart their containers, see ``inplace``), else by deleting
every pod and creating them again (``RECREATE``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import constants as c
from ..model import failure_policy as fp
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import bad_nodes, elastic, failure_policy, inplace
from .conditions import WARNING, Conditions, Event
from .failure_policy import Verdict

RECREATE = "Recreate"
IN_PLACE = "InPlace"


@dataclass(frozen=True)
class Decision:
    """How the group restarts: ``action`` (IN_PLACE or RECREATE), with the reason and message
    its conditions and Event carry."""

    action: str
    reason: str
    message: str


@dataclass(frozen=True)
class Response:
    """What a verdict did to the status: the job fails (``fails``), or its group restarts as a
    new attempt (``restarts``), or workers are replaced alone (neither). The pods follow from
    the status alone (``group``, then the converge step of ``reconcile``)."""

    fails: bool = False
    restarts: bool = False


def respond(
    job: JobSpec,
    verdict: Verdict,
    conds: Conditions,
    new: dict[str, Any],
    attempt: int,
    current: Mapping[int, WorkerPod],
    failed: list[int],
    replacing: Mapping[int, str],
    stuck: list[str],
    in_place: bool,
    move: bad_nodes.Move | None = None,
) -> Response:
    """Carry out ``verdict`` in the status being written (``new``, ``conds``): ``failed``, the
    failed workers' indices; ``stuck``, why a restart in place is stuck; ``in_place``, whether
    the cluster can restart pods in place; ``move``: the worker to move off its node
    (``bad_nodes``). A group recreated is one whose pods are created in the new attempt
    (``createdInAttempt``); one restarted in place keeps its pods, but for the worker moved:
    its pod is replaced (``status.replacing``), its successor created in the new attempt."""
    if verdict.action == fp.FAIL_JOB:
        failure_policy.record(new, verdict, attempt, in_place=False)
        return Response(fails=True)
    if verdict.action == fp.REPLACE_WORKER:
        failure_policy.record(new, verdict, attempt, in_place=False)
        why = verdict.message + (f"; {move.says}" if move is not None else "")
        elastic.replace(conds, new, failed, current, replacing, why)
        return Response()
    decision = decide(job, verdict, inplace.obstacle(job, current, stuck, in_place), move)
    failure_policy.record(new, verdict, attempt, decision.action == IN_PLACE)
    new["replacing"] = []
    if move is not None and decision.action == IN_PLACE:
        new["replacing"] = elastic.record({move.index: move.uid})
    new["attemptStartTime"] = conds.now
    if decision.action == RECREATE:
        new["createdInAttempt"] = attempt + 1
    restarting(conds, decision)
    return Response(restarts=True)


def decide(
    job: JobSpec, verdict: Verdict, obstacle: str | None, move: bad_nodes.Move | None = None
) -> Decision:
    """How to restart after ``verdict`` (a group restart); ``obstacle``: why the group cannot
    restart in place (None: it can); ``move``: a worker to move off its node, alone where the
    group restarts in place, with the group where a gang or a queue holds it whole."""
    if obstacle is None and move is not None and (whole := bad_nodes.whole_group(job)):
        obstacle = f"{move.says} and {whole}"
    if obstacle is None and move is not None:
        others = job.nodes - 1
        return Decision(
            IN_PLACE,
            "RestartingInPlace",
            f"{verdict.cause}; {move.says}, restarting the other {others} workers in place "
            f"({verdict.count})",
        )
    if obstacle is None:
        return Decision(
            IN_PLACE,
            "RestartingInPlace",
            f"{verdict.cause}; restarting all {job.nodes} workers in place ({verdict.count})",
        )
    count = verdict.count
    if job.restart_strategy == c.RESTART_IN_PLACE:
        count += f"; not in place: {obstacle}"
    if move is not None and move.says not in count:
        count += f"; {move.says}"
    return Decision(
        RECREATE, "WorkerFailed", f"{verdict.cause}; restarting all {job.nodes} workers ({count})"
    )


def restarting(conds: Conditions, decision: Decision) -> None:
    """The conditions of a group being restarted as a new attempt, and a Warning Event for
    every restart: one that follows another for the same reason (Restarting still True with it)
    changes no condition, yet is a new attempt that users must see."""
    conds.set(c.COND_RESTARTING, True, decision.reason, decision.message)
    conds.events.append(Event(WARNING, decision.reason, decision.message))
    if decision.action == IN_PLACE:
        conds.set(c.COND_RUNNING, False, "Restarting", "the group is restarting in place")
        return
    conds.set(c.COND_CREATED, False, "Restarting", "the group is being recreated")
    conds.set(c.COND_RUNNING, False, "Restarting", "the group is being recreated")
