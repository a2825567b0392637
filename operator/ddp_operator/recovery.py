"""What a failure means for a job: the decision ``reconcile.plan`` takes (its step 6) once some
workers of the current attempt failed, vanished or are being removed. Pure.

Today there are two answers: restart the whole group as a new attempt (every pod deleted, then
created again: ``RECREATE``) while ``backoffLimit`` allows, else fail the job. Other ways to
recover (in place, one worker of an elastic group) are further answers of ``decide``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import constants as c
from .conditions import WARNING, Conditions
from .jobspec import JobSpec

RECREATE = "Recreate"
FAIL = "Fail"
SHOWN = 3  # failures named in a message; the rest are counted


@dataclass(frozen=True)
class Decision:
    """How the job answers its failed workers: ``action`` (RECREATE or FAIL), with the
    reason and message its conditions and Event carry."""

    action: str
    reason: str
    message: str


def cause(failures: list[str]) -> str:
    """The failures in one line: the first few, then how many more."""
    text = "; ".join(failures[:SHOWN])
    if len(failures) > SHOWN:
        text += f" (and {len(failures) - SHOWN} more)"
    return text


def decide(job: JobSpec, failures: list[str], attempt: int) -> Decision:
    """The answer to ``failures`` (non-empty) in attempt ``attempt`` (restarts so far)."""
    why = cause(failures)
    if attempt >= job.backoff_limit:
        return Decision(
            FAIL,
            "BackoffLimitExceeded",
            f"{why}; the group was restarted {attempt} times (backoffLimit {job.backoff_limit})",
        )
    return Decision(
        RECREATE,
        "WorkerFailed",
        f"{why}; restarting all {job.nodes} workers (restart {attempt + 1} of {job.backoff_limit})",
    )


def restarting(conds: Conditions, decision: Decision) -> None:
    """The conditions of a group being restarted as a new attempt (a Warning Event with it)."""
    conds.set(c.COND_RESTARTING, True, decision.reason, decision.message, WARNING)
    conds.set(c.COND_CREATED, False, "Restarting", "the group is being recreated")
    conds.set(c.COND_RUNNING, False, "Restarting", "the group is being recreated")
