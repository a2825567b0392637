"""The registry of the job loops (``runner.JobRunner``), one per DDPJob, that kopf's handlers
feed: it starts, wakes and stops them, and follows the pods of the namespaces they are in
(``podwatch``): all namespaces at once when the operator watches them all, else each namespace
while it has a job."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..api.kube import Kube
from ..api.nodewatch import NodeHealth
from ..api.ownedwatch import OwnedIndex, OwnedWatch
from ..api.podwatch import PodIndex, PodWatch
from ..manifests.helpers_pod import Delivery
from ..model.workers import WorkerPod
from .runner import JobRunner, Key
from .stalls import EventReader


class Runners:
    """The registry of JobRunners, keyed by (namespace, name)."""

    def __init__(self) -> None:
        self.kube: Kube | None = None
        self.clusterwide = False
        self.isolation = True  # the operator's default for spec.network.isolation
        self.progress_url: str | None = None  # where worker pods report progress (None: off)
        self.helpers: Delivery | None = None  # how worker pods get the operator's helpers
        self.nodes: NodeHealth | None = None  # the nodes marked broken (None: none read)
        self.on_forget: list[Callable[[Key], None]] = []  # told of every job that is gone
        self.paused: Callable[[], bool] = lambda: False  # kopf's peering pauses this replica
        self.index = PodIndex(self.poke, self.gone)
        self._runners: dict[Key, JobRunner] = {}
        self._watches: dict[str, PodWatch] = {}  # by namespace ("": all)
        self._events: EventReader | None = None  # shared by the loops
        self.owned_index = OwnedIndex(self.poke)
        self._owned: dict[tuple[str, tuple[str, str, str]], OwnedWatch] = {}  # by (scope, api)

    async def owned(
        self, key: Key, wanted: Iterable[tuple[tuple[str, str, str], str]]
    ) -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
        """The objects with the job's label (by kind and name) as the watches of their
        resources (``wanted``: api, kind) show them, started here if new; and why they cannot
        be seen ('' if they can)."""
        assert self.kube is not None, "Runners.kube is set at operator start-up"
        scope = "" if self.clusterwide else key[0]
        unseen = []
        for api, kind in wanted:
            watch = self._owned.get((scope, api))
            if watch is None:
                watch = OwnedWatch(self.kube, api, kind, scope, self.owned_index)
                self._owned[(scope, api)] = watch
            if why := await watch.ready():
                unseen.append(why)
        return self.owned_index.get(key), "; ".join(unseen)

    async def pods(self, key: Key) -> list[WorkerPod]:
        """The job's pods as last observed, once its namespace's pods have been listed."""
        scope = "" if self.clusterwide else key[0]
        watch = self._watches.get(scope)
        if watch is None:
            assert self.kube is not None, "Runners.kube is set at operator start-up"
            watch = PodWatch(self.kube, scope, self.index, self._seen_again)
            self._watches[scope] = watch
        await watch.ready()
        return self.index.get(key)

    def _seen_again(self, namespace: str) -> None:
        """The pods of a namespace (every one if empty) are seen again: their jobs retry now."""
        for key, runner in self._runners.items():
            if not namespace or key[0] == namespace:
                runner.poke()

    def _unwatch(self, namespace: str) -> None:
        """Stop following a namespace's pods once it has no job loop left."""
        if self.clusterwide or any(key[0] == namespace for key in self._runners):
            return
        watch = self._watches.pop(namespace, None)
        if watch is not None:
            watch.stop()
            self.index.forget(namespace)
        for scope, api in [k for k in self._owned if k[0] == namespace]:
            self._owned.pop((scope, api)).stop()
        self.owned_index.forget(namespace)

    def phases(self) -> list[str]:
        """The status phase of every tracked job (for the jobs-by-phase gauge)."""
        return [r.status.get("phase") or "Pending" for r in self._runners.values()]

    def observe(self, key: Key, body: Mapping[str, Any]) -> None:
        """Start the job's loop, or hand it the newest body; a new UID replaces the loop. Not
        while paused (``standby``): an event kopf had queued before its pause is dropped."""
        assert self.kube is not None, "Runners.kube is set at operator start-up"
        if self.paused():
            return
        runner = self._runners.get(key)
        if runner is not None and runner.body["metadata"].get("uid") == body["metadata"].get("uid"):
            runner.update(body)
            return
        if runner is not None:
            runner.task.cancel()
        if self._events is None:
            self._events = EventReader(self.kube)
        runner = JobRunner(
            key,
            body,
            self.kube,
            self.pods,
            self._events,
            self.isolation,
            self.progress_url,
            self.owned,
            self.helpers,
            self.nodes,
        )
        self._runners[key] = runner
        runner.task.add_done_callback(lambda _, key=key, runner=runner: self._drop(key, runner))

    def job(self, key: Key) -> JobRunner | None:
        """The loop of a job, if it has one."""
        return self._runners.get(key)

    def worker(self, uid: str) -> WorkerPod | None:
        """The pod with ``uid`` if it is a worker of a job this operator runs (the job its
        controller), as the watch sees it now."""
        found = self.index.pod(uid)
        if found is None:
            return None
        key, pod = found
        runner = self._runners.get(key)
        job_uid = runner.body.get("metadata", {}).get("uid") if runner is not None else None
        return pod if job_uid and pod.owner_uid == job_uid else None

    def _drop(self, key: Key, runner: JobRunner) -> None:
        """A loop ended by itself (its job is gone): forget it, unless replaced already."""
        if self._runners.get(key) is runner:
            del self._runners[key]
            self._unwatch(key[0])
            for forget in self.on_forget:
                forget(key)

    def gone(self, key: Key, pod: WorkerPod) -> None:
        """A pod of the job was deleted."""
        runner = self._runners.get(key)
        if runner is not None:
            runner.gone(pod)

    def poke(self, key: Key) -> bool:
        """Something of the job changed: wake its loop; False if it has none."""
        runner = self._runners.get(key)
        if runner is not None:
            runner.poke()
        return runner is not None

    async def forget(self, key: Key) -> None:
        """The job is gone: stop its loop (and let Kueue release its pods)."""
        runner = self._runners.pop(key, None)
        if runner is not None:
            await runner.deleted()
            self._unwatch(key[0])
        for forget in self.on_forget:
            forget(key)

    async def pause(self) -> None:
        """Another replica takes over (``standby``): stop every loop and watch, forgetting
        what they knew (the jobs are taken up afresh on resume)."""
        keys = list(self._runners)
        await self.close()
        self.index.forget("")  # every namespace's
        for namespace in {key[0] for key in keys}:
            self.owned_index.forget(namespace)
        for key in keys:
            for forget in self.on_forget:
                forget(key)

    async def close(self) -> None:
        for key in list(self._runners):
            runner = self._runners.pop(key)
            await runner.stop()
        for watch in [*self._watches.values(), *self._owned.values()]:
            watch.stop()
        self._watches.clear()
        self._owned.clear()
