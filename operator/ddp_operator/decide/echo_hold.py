"""An echo waits for its cause: a failure whose own words say it is the consequence of another
rank's (a collective's connection closed by its peer) does not decide the attempt while another
worker of it still runs and may yet fail with the cause, for ``failure_facts.COLLATERAL_WINDOW``
at most from when the operator read the echo's log (its first sight of it, on its own clock),
or from the echo's end where its message said enough. Under torchrun a rank that raised tears
its node's processes down before its pod ends, so its peer's echo can end (and be seen) first;
deciding on the echo alone restarts a job that a rule on the cause's error would have failed.
Pure."""

from __future__ import annotations

from datetime import datetime

from ..model.workers import WorkerPod
from . import outcomes
from .failure_facts import COLLATERAL_WINDOW, WorkerFailure

SETTLE = 0.5  # seconds past the window: the last pass sees the cause's pod if it ended in it


def wait(
    failures: list[WorkerFailure], current: dict[int, WorkerPod], attempt: int, now: datetime
) -> float | None:
    """Seconds to hold the decision on ``failures`` (ordered, first first), or None to decide
    now: only while every failure is an echo by its own settled words (its log read where
    needed), another worker of the attempt still runs, and the window is open."""
    if not failures or any(not f.words.collateral or f.disruption for f in failures):
        return None
    if any(f.ask(attempt) is not None for f in failures):
        return None  # words not settled: its log is read first
    failed = {f.index for f in failures}
    running = [
        p
        for i, p in current.items()
        if i not in failed and not p.deleting and outcomes.phase(p, attempt) == "Running"
    ]
    seen = [w for f in failures if (w := _when(f.log.at if f.log else None) or _when(f.time))]
    if not running or not seen:
        return None
    left = (min(seen) + COLLATERAL_WINDOW - now).total_seconds()
    return min(left, COLLATERAL_WINDOW.total_seconds()) + SETTLE if left > 0 else None


def _when(time: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(time) if time else None
    except ValueError:
        return None
