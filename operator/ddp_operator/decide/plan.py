"""A Plan: what to do next for one job, as ``reconcile.plan`` decides it and the job loop
(``runner``) executes it. Pure data; ``endings`` fills in what a finished job still does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.constants import FINISHED_PHASES
from ..model.workers import WorkerPod
from .conditions import Event
from .exclusion import NodeEvent
from .failure_logs import LogAsk


@dataclass
class Plan:
    """What to do next for one job."""

    status: dict[str, Any]
    create: list[int] = field(default_factory=list)
    delete: list[WorkerPod] = field(default_factory=list)
    force_delete: list[WorkerPod] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    own: list[WorkerPod] = field(default_factory=list)  # the observed pods the job controls
    mark_unretriable: list[WorkerPod] = field(default_factory=list)  # for Kueue, once over
    release: list[WorkerPod] = field(default_factory=list)  # Kueue's finalizer to take off
    tell: list[WorkerPod] = field(default_factory=list)  # in-place pods to give the attempt
    nudge: list[WorkerPod] = field(default_factory=list)  # told, not restarted: synced again
    finish_pods: list[WorkerPod] = field(default_factory=list)  # in-place pods to let end
    in_place: bool = False  # new pods are built to restart in place
    read_logs: list[LogAsk] = field(default_factory=list)  # to read before acting (``to_read``)
    avoid: list[str] = field(default_factory=list)  # nodes its new pods keep off (``exclusion``)
    node_events: list[NodeEvent] = field(default_factory=list)  # Events on the nodes blamed

    @property
    def attempt(self) -> int:
        return int(self.status.get("restarts") or 0)

    def recheck_in(self, seconds: float | None) -> None:
        """Ask for a pass within ``seconds``, if given (the earliest asked for wins)."""
        if seconds is not None:
            was = self.requeue_after
            self.requeue_after = seconds if was is None else min(seconds, was)

    @property
    def finished(self) -> bool:
        return self.status.get("phase") in FINISHED_PHASES
