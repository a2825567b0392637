"""What a failure means for a job: the decision ``reconcile.plan`` takes (its step 6) once some
workers of the current attempt failed, vanished or are being removed. Pure.

While ``backoffLimit`` allows, the group restarts as a new attempt: in place where it can
(``IN_PLACE``: the same pods restart their containers, see ``inplace``), else by deleting every
pod and creating them again (``RECREATE``); past it, the job fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import constants as c
from ..model.jobspec import JobSpec
from .conditions import WARNING, Conditions

RECREATE = "Recreate"
IN_PLACE = "InPlace"
FAIL = "Fail"
SHOWN = 3  # failures named in a message; the rest are counted


@dataclass(frozen=True)
class Decision:
    """How the job answers its failed workers: ``action`` (IN_PLACE, RECREATE or FAIL), with
    the reason and message its conditions and Event carry."""

    action: str
    reason: str
    message: str


def cause(failures: list[str]) -> str:
    """The failures in one line: the first few, then how many more."""
    text = "; ".join(failures[:SHOWN])
    if len(failures) > SHOWN:
        text += f" (and {len(failures) - SHOWN} more)"
    return text


def decide(job: JobSpec, failures: list[str], attempt: int, obstacle: str | None) -> Decision:
    """The answer to ``failures`` (non-empty) in attempt ``attempt`` (restarts so far);
    ``obstacle``: why the group cannot restart in place (None: it can)."""
    why = cause(failures)
    if attempt >= job.backoff_limit:
        return Decision(
            FAIL,
            "BackoffLimitExceeded",
            f"{why}; the group was restarted {attempt} times (backoffLimit {job.backoff_limit})",
        )
    count = f"restart {attempt + 1} of {job.backoff_limit}"
    if obstacle is None:
        return Decision(
            IN_PLACE,
            "RestartingInPlace",
            f"{why}; restarting all {job.nodes} workers in place ({count})",
        )
    if job.restart_strategy == c.RESTART_IN_PLACE:
        count += f"; not in place: {obstacle}"
    return Decision(
        RECREATE, "WorkerFailed", f"{why}; restarting all {job.nodes} workers ({count})"
    )


def restarting(conds: Conditions, decision: Decision) -> None:
    """The conditions of a group being restarted as a new attempt (a Warning Event with it)."""
    conds.set(c.COND_RESTARTING, True, decision.reason, decision.message, WARNING)
    if decision.action == IN_PLACE:
        conds.set(c.COND_RUNNING, False, "Restarting", "the group is restarting in place")
        return
    conds.set(c.COND_CREATED, False, "Restarting", "the group is being recreated")
    conds.set(c.COND_RUNNING, False, "Restarting", "the group is being recreated")
