"""Bad nodes, for one failed attempt: the deciding failure blamed on its node (``blame``), the
node kept out (``exclusion``), and the worker that moves off it (``recovery``). Pure.

The worker blamed moves: in a group restarted in place it alone is recreated (its pod deleted,
its successor created with the others' attempt, off the nodes kept out) while the others restart
where they stand; in a group recreated, or an elastic job's replacement, every new pod avoids the
nodes kept out anyway. Within a gang or a queue (which place and admit the group whole) the
group is recreated instead, and the message says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import failure_policy as fp
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import blame, exclusion
from .conditions import Conditions
from .failure_policy import Verdict


@dataclass(frozen=True)
class Move:
    """The worker to move off ``node`` (its index, its pod's UID)."""

    index: int
    uid: str
    node: str

    @property
    def says(self) -> str:
        return f"worker {self.index} moves off node {self.node}"


@dataclass(frozen=True)
class Judged:
    """What the attempt's failure meant for its node: the worker to move (None: none), and the
    deciding failure's streak on its node (``blame.streak``)."""

    move: Move | None
    streak: int


def judge(
    job: JobSpec,
    verdict: Verdict,
    conds: Conditions,
    new: dict[str, Any],
    status: Mapping[str, Any],
    current: Mapping[int, WorkerPod],
    broken: Mapping[str, str],
    attempt: int,
    events: list[exclusion.NodeEvent],
) -> Judged:
    """Blame the verdict's deciding failure on its node if it is to blame, and keep that node
    out (the status being written: ``new``; ``status``: the job's last)."""
    first = verdict.first
    node = blame.node_of(first, current)
    in_a_row = blame.streak(first, node, status, attempt)
    if verdict.action == fp.FAIL_JOB:
        return Judged(None, in_a_row)
    found = blame.of(job, first, verdict.rule, current, broken, in_a_row)
    if found is None or not exclusion.exclude(job, conds, new, found, attempt, events):
        return Judged(None, in_a_row)
    pod = current.get(first.index)
    if pod is None or pod.node != found.node or not pod.uid:
        return Judged(None, 0)
    return Judged(Move(first.index, pod.uid, found.node), 0)


def note(new: dict[str, Any], judged: Judged) -> None:
    """The streak, on ``status.firstFailure`` (``nodeStreak``), for the next failure's
    ``blame.streak``."""
    first = new.get("firstFailure")
    if isinstance(first, dict):
        if judged.streak:
            new["firstFailure"] = {**first, "nodeStreak": judged.streak}
        else:
            new["firstFailure"] = {k: v for k, v in first.items() if k != "nodeStreak"}


def whole_group(job: JobSpec) -> str | None:
    """Why the worker cannot move alone in a group restarted in place (None: it can)."""
    if job.gang is not None:
        return f"its gang ({job.gang.scheduler}) places the group whole"
    if job.queue is not None:
        return f"Kueue (LocalQueue {job.queue.name}) admits the group whole"
    return None
