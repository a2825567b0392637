"""How a group restarts, once ``failure_policy`` decided that it does: in place where it can
(``IN_PLACE``: the same pods restart their containers, see ``inplace``), else by deleting every
pod and creating them again (``RECREATE``). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from ..model import constants as c
from ..model.jobspec import JobSpec
from .conditions import WARNING, Conditions
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


def decide(job: JobSpec, verdict: Verdict, obstacle: str | None) -> Decision:
    """How to restart after ``verdict`` (a group restart); ``obstacle``: why the group cannot
    restart in place (None: it can)."""
    if obstacle is None:
        return Decision(
            IN_PLACE,
            "RestartingInPlace",
            f"{verdict.cause}; restarting all {job.nodes} workers in place ({verdict.count})",
        )
    count = verdict.count
    if job.restart_strategy == c.RESTART_IN_PLACE:
        count += f"; not in place: {obstacle}"
    return Decision(
        RECREATE, "WorkerFailed", f"{verdict.cause}; restarting all {job.nodes} workers ({count})"
    )


def restarting(conds: Conditions, decision: Decision) -> None:
    """The conditions of a group being restarted as a new attempt (a Warning Event with it)."""
    conds.set(c.COND_RESTARTING, True, decision.reason, decision.message, WARNING)
    if decision.action == IN_PLACE:
        conds.set(c.COND_RUNNING, False, "Restarting", "the group is restarting in place")
        return
    conds.set(c.COND_CREATED, False, "Restarting", "the group is being recreated")
    conds.set(c.COND_RUNNING, False, "Restarting", "the group is being recreated")
