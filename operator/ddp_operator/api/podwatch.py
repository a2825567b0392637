"""The worker pods the operator sees, by job: a list, then a watch, of the pods with the
operator's job label, in one namespace (or in all).

The operator once had kopf index these pods; kopf's handling of each event (its causes,
per-object memory, loggers and handler machinery, twice per event: index and event handler)
was most of the operator's CPU when pods came up (bench/README.md). This is the informer
pattern instead: list, watch from the list's version, list again when that version is too old.
A job loop waits until its scope's first list is in (``ready``), so a restarted operator never
mistakes an unseen pod for a lost one; while the pods cannot be seen, ``ready`` raises why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..decide.failures import PodsUnseen, api_message
from ..model import constants as c
from ..model.workers import WorkerPod, observe
from .kube import Kube
from .kubewatch import WatchExpired, watch_pods

log = logging.getLogger(__name__)

Key = tuple[str, str]
MAX_BACKOFF = 30.0
UNSEEN_AFTER = 3  # failed watches in a row after which the jobs are told they are not seen


Change = tuple[str, str, Key, WorkerPod | None]  # (event, pod UID, its job, its state)


def digest(events: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Change]:
    """Watch events (type, pod) as the index takes them; the state only of the pods with a job
    label (None otherwise). Pure: the watch's thread runs it, so that only these small records,
    not whole pods, wait for the event loop (a backlog of 781 pods, 25 KB each, in S4)."""
    changes: list[Change] = []
    for kind, body in events:
        meta = body.get("metadata") or {}
        job = (meta.get("labels") or {}).get(c.LABEL_JOB)
        key = (meta.get("namespace") or "", job or "")
        changes.append((kind, meta.get("uid") or "", key, observe(body) if job else None))
    return changes


class PodIndex:
    """Worker pods by (namespace, job name), kept from watch events; it tells ``changed`` of
    every job whose pods changed, and ``gone`` of every pod that went (its last state)."""

    def __init__(
        self, changed: Callable[[Key], None], gone: Callable[[Key, WorkerPod], None]
    ) -> None:
        self.changed, self.gone = changed, gone
        self.by_job: dict[Key, dict[str, WorkerPod]] = {}
        self.where: dict[str, Key] = {}  # pod UID -> its job's key

    def get(self, key: Key) -> list[WorkerPod]:
        """The job's pods as last observed."""
        return list(self.by_job.get(key, {}).values())

    def pod(self, uid: str) -> tuple[Key, WorkerPod] | None:
        """The pod with ``uid`` and its job's key, if it is kept."""
        key = self.where.get(uid)
        pod = self.by_job.get(key, {}).get(uid) if key is not None else None
        return (key, pod) if key is not None and pod is not None else None

    def _drop(self, uid: str) -> tuple[Key, WorkerPod] | None:
        key = self.where.pop(uid, None)
        if key is None:
            return None
        pods = self.by_job[key]
        pod = pods.pop(uid)
        if not pods:
            del self.by_job[key]
        return key, pod

    def apply(self, changes: Iterable[Change]) -> None:
        """Take digested watch events (``digest``): ADDED, MODIFIED or DELETED."""
        for kind, uid, key, pod in changes:
            before = self._drop(uid)
            if kind == "DELETED":
                if pod is None and before is not None:  # its labels were taken off
                    key, pod = before
                if pod is not None:
                    self.gone(key, pod)
            elif pod is not None:
                self.by_job.setdefault(key, {})[uid] = pod
                self.where[uid] = key
            if before is not None and before[0] != key:
                self.changed(before[0])
            if key[1]:
                self.changed(key)

    def _uids(self, namespace: str) -> list[str]:
        """The UIDs of the pods kept in ``namespace`` (in every namespace if empty)."""
        return [u for u, k in self.where.items() if not namespace or k[0] == namespace]

    def forget(self, namespace: str) -> None:
        """Drop a namespace's pods, telling no one: no job there is followed any more."""
        for uid in self._uids(namespace):
            self._drop(uid)

    def replace(self, namespace: str, items: list[Mapping[str, Any]]) -> None:
        """Take a full list of a namespace's pods (every namespace's if empty): a pod no
        longer listed went while the watch was not following."""
        listed = {(p.get("metadata") or {}).get("uid") for p in items}
        for uid in [u for u in self._uids(namespace) if u not in listed]:
            if dropped := self._drop(uid):
                self.gone(*dropped)
                self.changed(dropped[0])
        self.apply(digest(("ADDED", p) for p in items))


class Handover:
    """Changes handed from a watch's thread to the event loop in batches: one wake-up of the
    loop takes every change that came while it was busy (a wake-up per event was 18% of the
    operator's busy time while a group of 2048 came up: bench/README.md). Changes keep their
    order, and a call the thread hands over after them (the watch's end) runs after them."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, apply: Callable[[list[Change]], None]
    ) -> None:
        self.loop, self.apply = loop, apply
        self.lock = threading.Lock()
        self.pending: list[Change] = []

    def put(self, changes: list[Change]) -> None:
        """In the watch's thread: queue ``changes``; wake the loop if nothing was queued."""
        with self.lock:
            wake = not self.pending
            self.pending.extend(changes)
        if wake:
            _call_soon(self.loop, self._drain)

    def _drain(self) -> None:
        """In the loop: apply everything queued so far, at once."""
        with self.lock:
            changes, self.pending = self.pending, []
        if changes:
            self.apply(changes)


class PodWatch:
    """A PodIndex kept current by a list and a watch in a thread of its own. While the pods
    cannot be seen (the first list fails, or the watch fails UNSEEN_AFTER times in a row),
    ``ready`` raises why, for the jobs to show; ``recovered`` is told when they are seen again."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        index: PodIndex,
        recovered: Callable[[str], None] = lambda namespace: None,
    ) -> None:
        self.kube, self.namespace, self.index = kube, namespace, index
        self.recovered = recovered
        self.tried = asyncio.Event()  # the first list was tried
        self.unseen: tuple[str, BaseException] | None = None  # (the step, its error)
        self.failures = 0  # in a row
        self.stopped = threading.Event()
        self.response: Any = None  # the open watch's, to end it at once on stop()
        self.version = ""  # the resource version to watch from; "" to list first
        self.task = asyncio.create_task(self._follow(), name=f"pods/{namespace or '*'}")

    async def ready(self) -> None:
        """Return once the first list is in; raise PodsUnseen while the pods cannot be seen."""
        await self.tried.wait()
        if self.unseen is not None:
            raise PodsUnseen(*self.unseen)

    def _seen(self) -> None:
        """The pods are listed, or a watch opened: they can be seen."""
        self.tried.set()
        self.failures = 0
        if self.unseen is not None:
            self.unseen = None
            self.recovered(self.namespace)

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"

        handover = Handover(loop, self.index.apply)

        def deliver(events: list[Any], version: str) -> None:  # in the watch's thread
            self.version = version  # read by the loop after these events are applied
            if events and not self.stopped.is_set():
                handover.put(digest(events))

        def opened(response: Any) -> None:  # in the watch's thread
            self.response = response
            if self.stopped.is_set():
                _end(response)
            else:
                _call_soon(loop, self._seen)

        while True:
            listing = not self.version
            try:
                if listing:
                    items, self.version = await self.kube.list_pods(self.namespace, c.LABEL_JOB)
                    self.index.replace(self.namespace, items)
                    self._seen()
                await _in_thread(
                    watch_pods,
                    self.kube,
                    self.namespace,
                    c.LABEL_JOB,
                    self.version,
                    deliver,
                    opened,
                )
            except WatchExpired:
                self.version = ""
            except Exception as exc:  # resumed after the last event taken, with backoff
                self.failures += 1
                step = f"{'listing' if listing else 'watching'} the pods in {where}"
                if not self.tried.is_set() or self.unseen or self.failures >= UNSEEN_AFTER:
                    self.unseen = (step, exc)
                    self.tried.set()
                backoff = min(MAX_BACKOFF, 0.5 * 2**self.failures)
                log.warning("%s: %s; again in %.1fs", step, api_message(exc), backoff)
                await asyncio.sleep(backoff)

    def stop(self) -> None:
        """Stop following: the watch is ended, and any event still under way dropped."""
        self.stopped.set()
        self.task.cancel()
        if self.response is not None:
            _end(self.response)


async def _in_thread(func: Callable[..., str], *args: Any) -> str:
    """Run a blocking call in a daemon thread of its own (a watch may outlive the task that
    awaits it: a pool's thread would hold up the process's exit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()

    def settle(result: str | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result or "")

    def run() -> None:
        try:
            result = func(*args)
        except BaseException as exc:
            _call_soon(loop, settle, None, exc)
        else:
            _call_soon(loop, settle, result, None)

    threading.Thread(target=run, name="pod-watch", daemon=True).start()
    return await done


def _end(response: Any) -> None:
    """End a watch's response from another thread (urllib3 2.3+); if it cannot, the watch ends
    by itself within WATCH_SECONDS, its events dropped."""
    with contextlib.suppress(Exception):
        response.shutdown()


def _call_soon(loop: asyncio.AbstractEventLoop, func: Callable[..., None], *args: Any) -> None:
    """Hand a call to the loop from another thread; nothing if the loop is closed (exiting)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(func, *args)
