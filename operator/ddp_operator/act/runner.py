"""One reconcile loop per DDPJob: wakes on any change of the job or its pods, plans, executes.

Events for a job and its pods only set a flag; the loop coalesces a burst of them into one
pass. Each pass reads the job and its pods from memory (the watch-fed index), asks the pure
planner what to do, then writes (see ``JobRunner.execute`` for the order). The loop remembers
the status it wrote last, so a pass that runs before the watch echoes that write back still
sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from ..api import metrics
from ..api.kube import Kube
from ..api.nodewatch import NOT_TAINTED, NodeHealth, post_node_event
from ..api.transport import JobGone, StatusConflict
from ..decide import checkpoints, group, kueue_workload, pacing, progress_report, reconcile
from ..decide.conditions import format_time
from ..decide.failures import Failure, InPlaceRefused, PodsUnseen, api_message, classify
from ..decide.memory import Memory
from ..manifests import (
    builders,
    helpers_pod,
    inplace_pod,
    job_configmap,
    netpol,
    node_avoid,
    progress_pod,
    worker_env,
)
from ..model import constants as c
from ..model.jobspec import SpecError, resolve
from ..model.workers import WorkerPod
from . import claims, failure_logs, kueue_steps, owned_steps, stalls, workload_steps
from .status_writer import StatusWriter
from .steps import all_steps

log = logging.getLogger(__name__)

Key = tuple[str, str]
PodSource = Callable[[Key], Awaitable[list[WorkerPod]]]

MAX_BACKOFF = 60.0
REQUESTED_TTL = 10.0  # seconds a created pod may take to show in the watch before it is re-asked
KEPT = frozenset({c.KUEUE_PREBUILT})  # the job's annotations a loop reads


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """The job as a loop keeps it: its metadata without managedFields and annotations (which
    made most of a kept job's memory) but the one read here (MultiKueue's prebuilt Workload),
    its spec and status."""
    meta = {k: v for k, v in body["metadata"].items() if k not in ("managedFields", "annotations")}
    kept = {k: v for k, v in (body["metadata"].get("annotations") or {}).items() if k in KEPT}
    return {**body, "metadata": {**meta, "annotations": kept} if kept else meta}


def newer(known: str | None, seen: str | None) -> str | None:
    """The job's resourceVersion after an event showing ``seen``: an echo of a version older
    than the one a write of ours returned (``known``) is not taken, or the next conditional
    write would conflict for nothing. etcd's versions are integers; others are taken as seen."""
    if not seen:
        return known
    if known and known.isdigit() and seen.isdigit() and int(seen) < int(known):
        return known
    return seen


def _progress(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return (body.get("status") or {}).get("progress")


def _checkpoint(body: Mapping[str, Any], marked: Mapping[str, Any] | None) -> Any:
    """The job's checkpoint: as observed, or as last taken if newer (the progress desk writes
    it, not the loop: ``checkpoints``)."""
    return checkpoints.latest((body.get("status") or {}).get("checkpoint"), marked)


class JobRunner:
    """The reconcile loop of one DDPJob."""

    def __init__(
        self,
        key: Key,
        body: Mapping[str, Any],
        kube: Kube,
        pods: PodSource,
        events: stalls.EventReader | None = None,
        isolation: bool = True,
        progress_url: str | None = None,
        owned: owned_steps.Source | None = None,
        helpers: helpers_pod.Delivery | None = None,
        nodes: NodeHealth | None = None,
    ):
        self.key = key
        self.body = slim(body)
        self.kube = kube
        self.pods = pods
        self.events = events or stalls.EventReader(kube)  # shared by the registry's loops
        self.isolation = isolation  # the operator's default for spec.network.isolation
        self.progress_url = progress_url  # where its pods report progress (``progress_pod``)
        self.helpers = helpers  # how its pods get the operator's helpers (None: they do not)
        self.owned = owned  # its owned objects as watched (None: not kept, ``owned_steps``)
        self.nodes = nodes  # the nodes marked broken (None: none read)
        self.memory = Memory(body.get("status"))
        version = body["metadata"].get("resourceVersion")
        self.writer = StatusWriter(kube, key, self.memory, version)
        self.failure: Failure | None = None  # the last pass's, until a pass goes through
        self.refused: str | None = None  # why the API server refused in-place pods, if it did
        self.reported: dict[str, Any] | None = None  # its latest report, maybe not written yet
        self.marked: dict[str, Any] | None = None  # its latest checkpoint, maybe not written yet
        self.stacks: dict[int, dict[str, Any]] = {}  # where its quiet ranks stand (``culprit``)
        self.stacks_attempt = -1  # the attempt they stand in
        self.spent = 0.0  # CPU seconds the last pass's decisions took (``pacing``)
        self.legacy_env = False  # a pod of the job read the legacy ConfigMap (``job_configmap``)
        self.logs = failure_logs.FailureLogs(kube)  # its failures' logs read, once per attempt
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._loop(), name=f"ddpjob/{key[0]}/{key[1]}")

    def update(self, body: Mapping[str, Any]) -> None:
        """A new version of the job was observed (its status is taken if further on); one
        that differs in its training's progress only leaves the loop asleep, unless it is an
        attempt's first report (the loop then sets its stall clock: ``hangs``)."""
        old, self.body = self.body, slim(body)
        self.version = newer(self.version, body["metadata"].get("resourceVersion"))
        first = progress_report.first_of_attempt(_progress(old), _progress(self.body))
        if progress_report.same_but_progress(old, self.body) and not first:
            return
        if self.memory.adopt(body.get("status")) and not self.writer.writing:
            log.info("ddpjob %s/%s: took the status another operator wrote", *self.key)
        self.wake.set()

    async def reread(self) -> None:
        """Take the job as it is now (``StatusWriter.reread``)."""
        self.body = slim(await self.writer.reread())

    @property
    def version(self) -> str | None:
        """The job's resourceVersion the loop last knew: its status writes are conditional on it."""
        return self.writer.version

    @version.setter
    def version(self, value: str | None) -> None:
        self.writer.version = value

    def gone(self, pod: WorkerPod) -> None:
        """One of the pods with the job's labels was deleted."""
        self.memory.gone(pod, (self.body.get("metadata") or {}).get("uid"))
        self.wake.set()

    @property
    def status(self) -> dict[str, Any]:
        return self.memory.status

    def poke(self) -> None:
        """One of the job's pods changed."""
        self.wake.set()

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def deleted(self) -> None:
        """The job was deleted: its loop stops, and the pods Kueue holds are marked so that
        Kueue lets them go with the group."""
        await self.stop()
        await self.left_behind()

    async def left_behind(self) -> None:
        """The job is gone: mark the pods Kueue holds so that it lets them go with the group."""
        uid = (self.body.get("metadata") or {}).get("uid")
        try:
            pods = await self.pods(self.key)
        except PodsUnseen as exc:  # the job is gone: no status, but its Events can still tell
            why = f"its pods are not marked for Kueue to let go: {exc}"
            log.warning("ddpjob %s/%s deleted; %s", *self.key, why)
            kopf.event(self.body, type="Warning", reason="PodsUnseen", message=why)
            return
        await kueue_steps.mark_left_behind(self.kube, *self.key, uid, pods)

    async def _loop(self) -> None:
        failures = 0
        while True:
            self.wake.clear()
            try:
                delay = await self.reconcile_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except JobGone as gone:  # the DELETED event may never come (namespace deleted),
                log.info("%s: its loop ends", gone)  # or find this loop ended already
                await self.left_behind()
                return
            except StatusConflict as exc:  # decided from an older job: read it, decide again
                log.info("%s: reading it again", exc)
                await self.reread()
                await asyncio.sleep(pacing.settle(self.spent))
                continue
            except Exception as exc:  # reported on the job, retried with backoff; never dies
                failures += 1
                backoff = min(MAX_BACKOFF, 0.5 * 2**failures)
                try:
                    await self.report(exc, backoff)
                except JobGone as gone:
                    log.info("%s: its loop ends", gone)
                    return
                # A change of the job or its pods (e.g. the user fixed it) retries sooner.
                await asyncio.sleep(pacing.SETTLE_SECONDS * 5)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=backoff)
                continue
            if self.failure is not None:
                self.failure = None  # the pass went through: one more pass clears Blocked
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=delay)
            await asyncio.sleep(pacing.settle(self.spent))

    async def report(self, exc: Exception, backoff: float) -> None:
        """Put a failed pass on the job: Failed if permanent, else the Blocked condition."""
        self.failure = failure = classify(exc)
        why = f"{failure.reason}: {failure.message}"
        log.warning("ddpjob %s/%s: %s; retry in %.1fs", *self.key, why, backoff)
        meta = self.body.get("metadata") or {}
        now, generation = datetime.now(UTC), meta.get("generation", 0)
        try:
            try:
                job = resolve(self.body)
                pods = await self.pods(self.key)
                pods, _ = await stalls.explain(self.events, job, pods, now)
            except SpecError:
                plan = reconcile.rejected(self.status, failure, now, generation)
            except PodsUnseen:
                plan = reconcile.blocked(self.status, failure, now, generation)
            else:
                seen, evicted = self.memory.seen, self.memory.evicted
                plan = reconcile.plan(
                    job,
                    self.status,
                    pods,
                    now,
                    generation,
                    failure,
                    seen,
                    evicted,
                    last=self.memory.last,
                    logs=self.logs.known(job),
                )
                # Only the report; the actions are retried by the next pass.
                plan.create, plan.delete, plan.force_delete, plan.delete_job = [], [], [], False
            await self.record(plan)
        except JobGone:
            raise
        except Exception as again:  # the API server is likely unreachable: nothing can be told
            log.warning("ddpjob %s/%s: could not report it: %s", *self.key, api_message(again))

    async def reconcile_once(self) -> float | None:
        """One pass; returns seconds until a timed re-check is due (deadline, TTL), if any."""
        started = time.perf_counter()
        body = self.body
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None  # garbage collection removes the children
        job = resolve(body)
        admission = await workload_steps.admission(self.kube, job)
        job = kueue_workload.as_admitted(job, admission)  # held (suspended) until admitted
        pods = await self.pods(self.key)
        now, generation = datetime.now(UTC), meta.get("generation", 0)
        seen, evicted = self.memory.seen, self.memory.evicted
        told = await kueue_steps.holdup(self.kube, job, pods)
        pods, look_again = await stalls.explain(self.events, job, pods, now)
        broken = await self.nodes.broken() if self.nodes is not None else {}

        def decide() -> reconcile.Plan:
            deciding = time.thread_time()  # CPU time: not the watches' hold of the GIL
            plan = reconcile.plan(
                job,
                {**self.status, "checkpoint": _checkpoint(body, self.marked)},
                pods,
                now,
                generation,
                self.failure,
                seen,
                evicted,
                told,
                self.refused,
                self.memory.last,
                self._progress(body),
                admission,
                self.logs.known(job),
                self._stacks(job, pods),
                broken,
            )
            self.spent = time.thread_time() - deciding
            return plan

        plan = decide()
        if await self.logs.read(job, plan.read_logs, self.body):  # once per pod and attempt
            plan = decide()
        plan.recheck_in(look_again)
        self.memory.passed(plan.own, plan.attempt, job.suspend)
        if self.owned is not None:  # what it owns kept as declared, told on the plan
            policy = netpol.isolated(job, self.isolation)
            await owned_steps.keep(
                self.kube, self.owned, job, plan, self.attempt, policy, now, generation
            )
        await self.execute(job, plan)
        await workload_steps.settle(self.kube, job, admission, plan)
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        if self.writer.due is not None:  # a held-back progress write
            plan.recheck_in(max(0.0, self.writer.due - time.monotonic()))
        return plan.requeue_after

    def _progress(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The training's latest report."""
        return progress_report.latest(_progress(body), self.reported)

    def _stacks(self, job: Any, pods: list[WorkerPod]) -> dict[int, dict[str, Any]]:
        """Where the job's quiet ranks stand in its group's attempt, the one the pass acts on
        (``group.attempt``: its own pods may be told a later one than the status says), as
        ``progress_desk`` took them in (kept here, never written: ``culprit``)."""
        own = [p for p in pods if job.uid and p.owner_uid == job.uid]
        attempt = group.attempt(self.status, own)
        return dict(self.stacks) if self.stacks_attempt == attempt else {}

    async def execute(self, job: Any, plan: reconcile.Plan) -> None:
        """Carry out a plan. One that removes anything or starts a new attempt records its status
        (and Events) first, so that a crash half-way can never make its own deletions look like
        failures; one that only creates pods creates them first and records the status after,
        which spares a write before the watch shows them. A failing step raises ``StepFailed``."""
        record_first = bool(plan.delete or plan.finish_pods) or plan.delete_job
        record_first = record_first or plan.attempt != self.attempt
        if record_first:
            await self.record(plan)
        if plan.mark_unretriable:  # before any deletion: Kueue must see why the group ends
            await kueue_steps.mark(self.kube, job.namespace, plan.mark_unretriable)
        if plan.release:  # pods Kueue stopped, ended, held only by its finalizer
            await kueue_steps.release(self.kube, job.namespace, plan.release)
        removals = [(p, False) for p in plan.delete] + [(p, True) for p in plan.force_delete]
        if removals:
            self.memory.deleting(p for p, _ in removals)
            await all_steps(
                (
                    f"deleting pod {p.name}",
                    self.kube.delete_pod(job.namespace, p.name, p.uid, force),
                )
                for p, force in removals
            )
        # After the status that records the attempt (a crash cannot lose it), or the end; the
        # attempt in the job's ConfigMap first (``inplace_pod``: where DDP_ATTEMPT comes from).
        legacy = job_configmap.legacy_in_use(job.name, plan.own)
        common = worker_env.read_by(job, plan.own)
        resume = checkpoints.resume_data(_checkpoint(self.body, self.marked))
        if plan.tell and not await claims.give_env(
            self.kube, job, plan.attempt, legacy, common, resume
        ):
            self.wake.set()  # gone meanwhile: the next pass creates it, then tells
            plan.tell = []
        await all_steps(self._marks(job, plan))
        created = bool(plan.create) and await self.create(job, plan, legacy, resume)
        if not record_first:
            await self.record(plan, created)
        if self.legacy_env and not legacy:  # its last reader is gone
            await claims.drop_legacy_env(self.kube, job)
        self.legacy_env = legacy
        if plan.delete_job:
            await self.kube.delete_job(job.namespace, job.name, job.uid)

    def _marks(self, job: Any, plan: reconcile.Plan) -> Iterator[tuple[str, Awaitable[bool]]]:
        """Tell the plan's pods its attempt (only those still at the attempt seen: ``standby``),
        nudge those told and not restarted since (``inplace``), and let the plan's finished pods
        end (their watches exit)."""
        when = format_time(datetime.now(UTC))
        for p in plan.tell:
            told = inplace_pod.told(plan.attempt, when, p.restarted, p.trainer_container)
            yield (
                f"giving attempt {plan.attempt} to pod {p.name}",
                self.kube.tell_pod(job.namespace, p.name, p.uid, str(p.attempt_now), told),
            )
        for p in plan.nudge:
            yield (
                f"nudging pod {p.name}'s kubelet (told attempt {p.attempt_now} at {p.told_at})",
                self.kube.annotate_pod(
                    job.namespace, p.name, p.uid, {c.NUDGED_AT_ANNOTATION: when}
                ),
            )
        for p in plan.finish_pods:
            yield (
                f"letting pod {p.name} end",
                self.kube.annotate_pod(job.namespace, p.name, p.uid, inplace_pod.FINISHED),
            )

    async def create(
        self,
        job: Any,
        plan: reconcile.Plan,
        legacy: bool = False,
        resume: dict[str, str] | None = None,
    ) -> bool:
        """Create the plan's workers (and the Service they need; ``legacy``: a pod of the job
        reads the legacy ConfigMap; ``resume``: where they resume), never reusing what is not
        the job's (``claims``: a template the API server refuses fails the job before any pod
        exists). A pod created
        lately is not asked for again before the watch shows it (a 409 and a read for 7% of
        512 workers)."""
        now = time.monotonic()
        keys = {i: (builders.worker_name(job, i), plan.attempt) for i in plan.create}
        wanted = self.memory.unasked(keys, now, REQUESTED_TTL)
        if len(wanted) < len(plan.create):
            plan.recheck_in(REQUESTED_TTL)
        if not wanted:
            return False

        def build(index: int) -> dict[str, Any]:
            pod = builders.build_worker_pod(job, index, plan.attempt, plan.in_place, resume)
            node_avoid.keep_off(pod, plan.avoid)  # the nodes the job keeps out, those marked
            if self.helpers and job.helpers:
                helpers_pod.add_helpers(pod, self.helpers)
            return progress_pod.add_reporting(pod, self.progress_url) if self.progress_url else pod

        fresh = len(wanted) == job.nodes
        try:
            policy = netpol.isolated(job, self.isolation)
            created, found = await claims.create_group(
                self.kube, job, build, wanted, fresh, policy, legacy, resume
            )
        except InPlaceRefused as exc:  # the next pass says so on the job and builds them anew
            self.refused = str(exc)
            self.wake.set()
            return False
        metrics.PODS_CREATED.inc(sum(created))
        done = [keys[i] for i, ok in zip(wanted, created, strict=True) if ok]
        # From now: under load, the requests may have waited longer than the TTL.
        self.memory.requested.update(dict.fromkeys(done, time.monotonic()))
        if not found:
            self.wake.set()  # gone meanwhile: the next pass creates it
        return any(created)

    @property
    def attempt(self) -> int:
        return self.memory.attempt

    async def record(self, plan: reconcile.Plan, created: bool = False) -> None:
        """Write the plan's status and post its Events (``status_writer``), and those on the
        nodes it blamed (once: the status now lists them)."""
        await self.writer.write(plan, self.body, created)
        events, plan.node_events = plan.node_events, []
        for event in events:
            failed = await post_node_event(self.kube, event.node, event.reason, event.message)
            if failed is not None:
                why = f"cannot post Event {event.reason} on node {event.node}: {failed}"
                kopf.event(self.body, type="Warning", reason="NodeEventFailed", message=why)
            # The taint for every workload, where the operator is told to: what it did, or why
            # not, on the job too.
            said = await self.nodes.taint(event.node) if self.nodes is not None else None
            if said is not None:
                refused = NOT_TAINTED in said
                kopf.event(
                    self.body,
                    type="Warning" if refused else "Normal",
                    reason="NodeNotTainted" if refused else "NodeTainted",
                    message=said,
                )
