"""What keeps a job's workers from starting, in the words of whoever knows: the scheduler's
(``Unschedulable``). Pure: the job's live pods of the current attempt in, conditions set.

Never restarts nor fails the job: the scheduler keeps retrying, and the job goes on once the
user has fixed the cause.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import constants as c
from .conditions import WARNING, Conditions
from .workers import WorkerPod


def report(conds: Conditions, live: Sequence[WorkerPod], nodes: int) -> None:
    """Set or clear the conditions from the live pods of the current attempt."""
    unschedulable(conds, live, nodes)


def unschedulable(conds: Conditions, live: Sequence[WorkerPod], nodes: int) -> None:
    """``Unschedulable`` with the scheduler's message for the first such worker."""
    stuck = sorted((p for p in live if p.unschedulable), key=lambda p: p.index)
    if stuck:
        conds.set(
            c.COND_UNSCHEDULABLE,
            True,
            "Unschedulable",
            f"{len(stuck)} of {nodes} workers cannot be scheduled; "
            f"{stuck[0].name}: {stuck[0].unschedulable}",
            WARNING,
        )
    else:
        conds.clear(c.COND_UNSCHEDULABLE, "Scheduled", "every worker is scheduled")
