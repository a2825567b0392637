"""Where the training's progress reports land: each checked against the job's own pods, then
written to the job's ``status.progress`` and its gauges: at most once per WRITE_EVERY seconds a
job whatever the reports say, the latest report winning; the first complete report of an attempt
(the attempt as the operator knows it, not as the report says) goes at once, once
(``progress_report.write_in``). 60 reports of the last step in 2 s make 2 writes at most.

Only a pod the job controls, as the operator's watch sees it now, reports for the job: the sender
is the pod the API server bound the report's token to (``progress_server``), so a pod of another
job or namespace, or one already deleted, is refused; so is a pod of an earlier attempt (an old
process still running while its pod restarts, or a pod of a group being replaced) and a report
that declares another attempt than the job's: a stale report would reset the stall clock. The
job's attempt is its group's, as the job loop acts on it (``group.attempt``): a pod already told
a later attempt than the status says reports for that one.

A report that says a new checkpoint (``checkpoints``) is written within CHECKPOINT_GAP seconds
of the last write, with ``status.checkpoint``, rather than the interval.

A rank quiet for a while sends where it stands instead (``{"stack": ...}``: any rank of the
job's world as torchrun numbered it, at most its pod's processes' worth, ``culprit``): kept in
the job loop's memory for its attempt, never written, read by the stall check to name the rank
that hung (``culprit``) and, where a rank's pod is busy (NCCL spins), to know it stands still
(``quiet``); once every rank has said so, the job loop is woken to look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from ..api import metrics
from ..api.kube import Kube
from ..api.progress_server import Sender
from ..api.transport import JobGone
from ..decide import checkpoints, culprit, group, kubeflow_status, progress_report
from ..model.jobspec import SpecError, resolve
from .registry import Runners
from .runner import Key

log = logging.getLogger(__name__)
WRITE_EVERY = 5.0  # seconds between two writes of one job's progress at least


class ProgressDesk:
    """Takes reports (``accept``) and writes each job's latest to its status."""

    def __init__(self, kube: Kube, runners: Runners) -> None:
        self.kube, self.runners = kube, runners
        self._latest: dict[Key, dict[str, Any]] = {}
        self._written: dict[Key, float] = {}
        self._later: dict[Key, asyncio.Task[None]] = {}
        self._sent: dict[Key, dict[str, Any]] = {}  # what each job's status holds
        self._early: dict[Key, int] = {}  # the attempt whose complete report went at once
        self._marks: dict[Key, dict[str, Any]] = {}  # a checkpoint not written yet
        self._marked: dict[Key, dict[str, Any]] = {}  # the checkpoint the status holds

    def refusal(self, key: Key, sender: Sender) -> str:
        """Why the sender may not report for the job ('' if it may)."""
        job = f"ddpjob {key[0]}/{key[1]}"
        if sender.namespace != key[0]:
            return f"a pod of namespace {sender.namespace} cannot report for {job}"
        runner = self.runners.job(key)
        if runner is None:
            return f"no {job} here"
        uid = runner.body["metadata"].get("uid")
        pods = self.runners.index.get(key)
        pod = next((p for p in pods if p.uid == sender.pod_uid and p.owner_uid == uid), None)
        if pod is None:
            return f"pod {sender.pod} is no worker of {job}"
        attempt = self._attempt(key)
        if pod.attempt_now != attempt or pod.restart_pending:
            return f"pod {sender.pod} runs an earlier attempt than {job}'s {attempt}"
        return ""

    async def accept(
        self,
        namespace: str,
        name: str,
        sender: Sender,
        payload: Any,
        kubeflow: bool = False,
        received: datetime | None = None,
    ) -> tuple[int, str]:
        """Answer one report: 202 once taken, else the HTTP status and why. ``kubeflow``: a
        status update of Kubeflow Trainer's protocol (``kubeflow_status``), read as a report;
        ``received``: when it came (its time: the step times are measured from it)."""
        key = (namespace, name)
        if self.runners.paused():  # sent here before the Service saw this replica not ready
            return 503, "a standby: another replica is active; retry"
        refused = self.refusal(key, sender)
        if refused:
            metrics.PROGRESS_REPORTS.labels("refused").inc()
            return 403, refused
        attempt, now = self._attempt(key), received or datetime.now(UTC)
        if not kubeflow and isinstance(payload, Mapping) and "stack" in payload:
            return self._stack(key, sender, payload, attempt, now)
        try:
            if kubeflow:
                payload = kubeflow_status.as_report(payload, self._before(key))
                if payload is None:
                    return 200, "nothing to take (no trainerStatus)"
            progress = progress_report.normalize(payload, now)
            mark = checkpoints.of_report(payload, attempt, now)
        except progress_report.BadReport as exc:
            metrics.PROGRESS_REPORTS.labels("invalid").inc()
            return 400, f"bad report: {exc}"
        if progress.get("attempt", attempt) != attempt:
            metrics.PROGRESS_REPORTS.labels("refused").inc()
            return 409, f"a report of attempt {progress['attempt']}: the job is at {attempt}"
        progress.setdefault("attempt", attempt)  # the sender's, checked above (Kubeflow's: none)
        metrics.PROGRESS_REPORTS.labels("accepted").inc()
        metrics.job_progress(namespace, name, progress, time.time())
        progress = progress_report.carry(self._before(key), progress)
        self._latest[key] = progress
        if (runner := self.runners.job(key)) is not None:  # a failure now reads it at once
            runner.reported = progress
        since = time.monotonic() - self._written.get(key, -math.inf)
        wait = progress_report.write_in(
            since, WRITE_EVERY, progress, self._early.get(key) == attempt
        )
        if checkpoints.moved(self._checkpoint(key), mark) and mark is not None:
            self._marks[key] = mark
            if runner is not None:  # a group restarting before the write resumes from it
                runner.marked = mark
        if key in self._marks:
            wait = min(wait, max(0.0, checkpoints.CHECKPOINT_GAP - since))
        if wait > 0:
            if key not in self._later:
                self._later[key] = asyncio.create_task(self._write_later(key, wait))
            return 202, "taken (written within seconds)"
        if progress_report.complete(progress):
            self._early[key] = attempt
        later = self._later.pop(key, None)
        if later is not None:  # this write takes the latest report: no second one after
            later.cancel()
        try:
            await self._write(key)
        except ApiException as exc:
            metrics.PROGRESS_REPORTS.labels("failed").inc()
            return 503, f"cannot write the job's status: {exc.status} {exc.reason}"
        return 202, "taken"

    def _stack(
        self, key: Key, sender: Sender, payload: Mapping[str, Any], attempt: int, now: datetime
    ) -> tuple[int, str]:
        """Keep where one rank of the sender's pod stands, for the job loop's stall check."""
        runner = self.runners.job(key)
        pod = next((p for p in self.runners.index.get(key) if p.uid == sender.pod_uid), None)
        if runner is None or pod is None:  # (checked by ``refusal``; gone since)
            return 403, f"pod {sender.pod} is no worker of ddpjob {key[0]}/{key[1]}"
        if payload.get("attempt", attempt) != attempt:
            metrics.PROGRESS_REPORTS.labels("refused").inc()
            return 409, f"a stack of attempt {payload.get('attempt')}: the job is at {attempt}"
        try:
            spec = resolve(runner.body)
            world = spec.node_bounds[1] * spec.procs_per_node  # an elastic job's largest
            kept = culprit.normalize(payload["stack"], pod.index, world, pod.name, now)
        except (culprit.BadStack, SpecError) as exc:
            metrics.PROGRESS_REPORTS.labels("invalid").inc()
            return 400, f"bad stack: {exc}"
        if runner.stacks_attempt != attempt:
            runner.stacks, runner.stacks_attempt = {}, attempt
        culprit.keep(runner.stacks, kept, spec.procs_per_node)
        if len(runner.stacks) >= spec.world_size:  # every rank has said: the loop looks
            runner.poke()
        metrics.PROGRESS_REPORTS.labels("accepted").inc()
        return 202, "taken"

    def _before(self, key: Key) -> Mapping[str, Any] | None:
        """The job's report before this one: held back, written, or in its status."""
        runner = self.runners.job(key)
        status = (runner.body.get("status") or {}) if runner is not None else {}
        return self._latest.get(key) or self._sent.get(key) or status.get("progress")

    def _checkpoint(self, key: Key) -> Mapping[str, Any] | None:
        """The job's checkpoint: held back, written, or in its status."""
        runner = self.runners.job(key)
        status = (runner.body.get("status") or {}) if runner is not None else {}
        return self._marks.get(key) or self._marked.get(key) or status.get("checkpoint")

    def _attempt(self, key: Key) -> int:
        """The group's attempt as the job's loop acts on it (-1: no loop): its status's, or a
        later one its own pods were told (``group.attempt``: the status write that said it may
        not have landed yet, or been lost)."""
        runner = self.runners.job(key)
        if runner is None:
            return -1
        uid = runner.body["metadata"].get("uid")
        own = [p for p in self.runners.index.get(key) if p.owner_uid == uid]
        return group.attempt(runner.status, own)

    async def _write_later(self, key: Key, wait: float) -> None:
        try:
            await asyncio.sleep(wait)
            await self._write(key)
        except ApiException as exc:
            metrics.PROGRESS_REPORTS.labels("failed").inc()
            log.warning("ddpjob %s/%s: progress not written: %s", *key, exc)
        finally:
            if self._later.get(key) is asyncio.current_task():
                del self._later[key]

    async def _write(self, key: Key) -> None:
        progress = self._latest.pop(key, None)
        runner = self.runners.job(key)
        if progress is None or runner is None:
            return
        self._written[key] = time.monotonic()
        old = self._sent.get(key) or (runner.body.get("status") or {}).get("progress")
        patch = {"progress": progress_report.merge_patch(old, progress)}
        mark = self._marks.pop(key, None)
        if mark is not None:
            patch["checkpoint"] = checkpoints.merge_patch(mark)
        with contextlib.suppress(JobGone):
            version = await self.kube.patch_status(*key, patch, verb="patch_progress")
            self._sent[key] = progress
            if mark is not None:
                self._marked[key] = mark
            runner.version = version or runner.version  # its next write need not conflict

    def forget(self, key: Key) -> None:
        """The job is gone: drop what is kept of it."""
        self._latest.pop(key, None)
        self._written.pop(key, None)
        self._sent.pop(key, None)
        self._early.pop(key, None)
        self._marks.pop(key, None)
        self._marked.pop(key, None)
        task = self._later.pop(key, None)
        if task is not None:
            task.cancel()
        metrics.forget_job(*key)
