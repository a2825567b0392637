"""One reconcile loop per DDPJob: wakes on any change of the job or its pods, plans, executes.

Events for a job and its pods only set a flag; the loop coalesces a burst of them into one
pass. Each pass reads the job and its pods from memory (kopf's watch-fed index), asks the pure
planner what to do, then writes (see ``JobRunner.execute`` for the order). The loop remembers
the status it wrote last, so a pass that runs before the watch echoes that write back still
sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from . import builders, metrics, reconcile
from .jobspec import SpecError, resolve
from .kube import Kube
from .workers import WorkerPod

log = logging.getLogger(__name__)

Key = tuple[str, str]
PodSource = Callable[[Key], Iterable[WorkerPod]]

SETTLE_SECONDS = 0.1  # lets a burst of pod events land before a pass
MAX_BACKOFF = 60.0


class JobRunner:
    """The reconcile loop of one DDPJob."""

    def __init__(self, key: Key, body: Mapping[str, Any], kube: Kube, pods: PodSource):
        self.key = key
        self.body = body
        self.kube = kube
        self.pods = pods
        self.status: dict[str, Any] = dict(body.get("status") or {})
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._loop(), name=f"ddpjob/{key[0]}/{key[1]}")

    def update(self, body: Mapping[str, Any]) -> None:
        """A new version of the job was observed."""
        self.body = body
        self.wake.set()

    def poke(self) -> None:
        """One of the job's pods changed."""
        self.wake.set()

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _loop(self) -> None:
        failures = 0
        while True:
            self.wake.clear()
            try:
                delay = await self.reconcile_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # retried with backoff; the loop never dies
                failures += 1
                backoff = min(MAX_BACKOFF, 0.5 * 2**failures)
                why = _brief(exc)
                log.warning(
                    "ddpjob %s/%s: pass failed (%s); retry in %.1fs", *self.key, why, backoff
                )
                await asyncio.sleep(backoff)  # changes seen meanwhile are in the next pass
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=delay)
            await asyncio.sleep(SETTLE_SECONDS)

    async def reconcile_once(self) -> float | None:
        """One pass; returns seconds until a timed re-check is due (deadline, TTL), if any."""
        started = time.perf_counter()
        body = self.body
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None  # garbage collection removes the children
        try:
            job = resolve(body)
        except (SpecError, KeyError, TypeError, ValueError) as exc:
            kopf.event(body, type="Warning", reason="InvalidSpec", message=str(exc))
            return None
        plan = reconcile.plan(
            job, self.status, self.pods(self.key), datetime.now(UTC), meta.get("generation", 0)
        )
        await self.execute(job, body, plan)
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        return plan.requeue_after

    async def execute(self, job: Any, body: Mapping[str, Any], plan: reconcile.Plan) -> None:
        """Carry out a plan. One that removes anything or starts a new attempt records its status
        (and Events) first, so that a crash half-way can never make its own deletions look like
        failures; one that only creates pods creates them first and records the status after,
        which spares a write before the pods exist."""
        record_first = bool(plan.delete) or plan.delete_job or plan.attempt != self.attempt
        if record_first:
            await self.record(job, body, plan)
        if plan.delete:
            await asyncio.gather(
                *(self.kube.delete_pod(job.namespace, p.name, p.uid) for p in plan.delete)
            )
        if plan.create:
            await self.kube.create_service(builders.build_service(job))
            pods = [builders.build_worker_pod(job, i, plan.attempt) for i in plan.create]
            created = await asyncio.gather(*(self.kube.create_pod(pod) for pod in pods))
            metrics.PODS_CREATED.inc(sum(created))
        if not record_first:
            await self.record(job, body, plan)
        if plan.delete_job:
            await self.kube.delete_job(job.namespace, job.name, job.uid)

    @property
    def attempt(self) -> int:
        return int(self.status.get("restarts") or 0)

    async def record(self, job: Any, body: Mapping[str, Any], plan: reconcile.Plan) -> None:
        """Write what changed in the status, then post the plan's Events."""
        if plan.attempt > self.attempt:
            metrics.GROUP_RESTARTS.inc()
        changed = {k: v for k, v in plan.status.items() if self.status.get(k) != v}
        if changed:
            await self.kube.patch_status(job.namespace, job.name, changed)
            self.status.update(plan.status)
        for event in plan.events:
            log.info("ddpjob %s/%s: %s: %s", job.namespace, job.name, event.reason, event.message)
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)


def _brief(exc: Exception) -> str:
    """An exception in one line: the API's status and message rather than its headers."""
    status, body = getattr(exc, "status", None), getattr(exc, "body", None)
    if status and body:
        try:
            return f"{status}: {json.loads(body).get('message', '')}"
        except ValueError:
            return f"{status}: {body[:200]}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class Runners:
    """The registry of JobRunners, keyed by (namespace, name)."""

    def __init__(self) -> None:
        self.kube: Kube | None = None
        self.index: Mapping[Key, Iterable[WorkerPod]] = {}
        self._runners: dict[Key, JobRunner] = {}

    def pods(self, key: Key) -> list[WorkerPod]:
        """The job's pods as last observed."""
        return list(self.index.get(key, ()))

    def phases(self) -> list[str]:
        """The status phase of every tracked job (for the jobs-by-phase gauge)."""
        return [r.status.get("phase") or "Pending" for r in self._runners.values()]

    def observe(self, key: Key, body: Mapping[str, Any]) -> None:
        """Start the job's loop, or hand it the newest body; a new UID replaces the loop."""
        assert self.kube is not None, "Runners.kube is set at operator start-up"
        runner = self._runners.get(key)
        if runner is not None and runner.body["metadata"].get("uid") == body["metadata"].get("uid"):
            runner.update(body)
            return
        if runner is not None:
            runner.task.cancel()
        self._runners[key] = JobRunner(key, body, self.kube, self.pods)

    def poke(self, key: Key) -> None:
        """A pod of the job changed."""
        runner = self._runners.get(key)
        if runner is not None:
            runner.poke()

    async def forget(self, key: Key) -> None:
        """The job is gone: stop its loop."""
        runner = self._runners.pop(key, None)
        if runner is not None:
            await runner.stop()

    async def close(self) -> None:
        for key in list(self._runners):
            await self.forget(key)
