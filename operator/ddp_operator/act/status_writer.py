"""How a job loop writes its job's status: what changed since its last write, held back while a
write would only move counts or progress, conditional on the job's resourceVersion (a replica
acting on an older view cannot overwrite a newer status: ``standby``), the plan's Events after
it, and the operator's counters of what the status records."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from ..api import metrics
from ..api.kube import Kube
from ..decide import goodput
from ..decide.conditions import progress_only
from ..decide.memory import Memory
from ..decide.plan import Plan
from ..decide.status_patch import merge_patch

log = logging.getLogger(__name__)

# A status write that only moves the worker counts waits this long after the previous write:
# a job of 512 workers coming up made 58 writes (each echoed back as a watch event) without it.
PROGRESS_INTERVAL = 1.0


class StatusWriter:
    """The status writes of one job (``key``); ``memory.status`` is the status last written."""

    def __init__(self, kube: Kube, key: tuple[str, str], memory: Memory, version: str | None):
        self.kube, self.key, self.memory = kube, key, memory
        self.version = version  # the job's resourceVersion the loop last knew
        self.written = float("-inf")  # when the status was last written (monotonic)
        self.due: float | None = None  # when a held-back write is due
        self.writing = False  # a write is on its way: its echo is the loop's own

    @property
    def status(self) -> dict[str, Any]:
        return self.memory.status

    def _count(self, plan: Plan, body: dict[str, Any]) -> None:
        """The operator's counters of what the new status records."""
        if plan.attempt > self.memory.attempt:
            metrics.GROUP_RESTARTS.inc()
            if plan.tell:
                metrics.IN_PLACE_RESTARTS.inc()
        was = int(self.status.get("replacements") or 0)
        if (replaced := int(plan.status.get("replacements") or 0) - was) > 0:
            metrics.REPLACEMENTS.inc(replaced)
        first = plan.status.get("firstFailure")
        if first and not goodput.same_failure(first, self.status.get("firstFailure")):
            metrics.FAILURES.labels(first.get("reason", ""), first.get("action", "")).inc()
        known = {e.get("node") for e in self.status.get("excludedNodes") or ()}
        for entry in plan.status.get("excludedNodes") or ():
            if entry.get("node") not in known:
                metrics.NODE_BLAMES.labels(entry.get("reason", "")).inc()
        ledger, was = plan.status.get("goodput"), self.status.get("goodput") or {}
        if ledger and ledger != was:
            reason = (first or {}).get("reason", "")
            lost = ((metrics.LOST_SECONDS, "lostSeconds"), (metrics.LOST_STEPS, "stepsLost"))
            for counter, field in lost:
                if (more := float(ledger.get(field) or 0) - float(was.get(field) or 0)) > 0:
                    counter.labels(reason).inc(more)
            progress = (body.get("status") or {}).get("progress")
            share = goodput.ratio({**self.status, **plan.status}, progress, datetime.now(UTC))
            if share is not None:
                metrics.JOB_GOODPUT.labels(*self.key).set(share)

    async def write(self, plan: Plan, body: dict[str, Any], created: bool = False) -> None:
        """Write what changed in the status, then post the plan's Events (on ``body``, the job).
        Progress waits until PROGRESS_INTERVAL after the last write, and so does a status
        without Events that follows new pods (``created``): the watch shows them within it,
        and the next pass writes a status that counts them; either way a timed pass writes it.
        StatusConflict if the job moved on since ``version``."""
        self._count(plan, body)
        changed = merge_patch(self.status, plan.status)
        now = time.monotonic()
        hold = now + PROGRESS_INTERVAL if created and not plan.events else self.written
        if progress_only(self.status, plan.status):
            hold = max(hold, self.written + PROGRESS_INTERVAL)
        if not changed:
            self.due = None
        elif now < hold:
            self.due = hold  # a pass then writes the latest status
        else:
            self.writing = True
            try:
                self.version = await self.kube.patch_status(
                    *self.key, changed, version=self.version
                )
            finally:
                self.writing = False
            self.status.update(plan.status)
            self.written, self.due = time.monotonic(), None
        for event in plan.events:
            log.info("ddpjob %s/%s: %s: %s", *self.key, event.reason, event.message)
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)

    async def reread(self) -> dict[str, Any]:
        """The job as it is now, whose status replaces the one last written (which a write not
        the loop's, or another replica's, made stale)."""
        body = await self.kube.get_job(*self.key)
        self.version = body["metadata"].get("resourceVersion")
        self.memory.status = dict(body.get("status") or {})
        self.due = None
        return body
