"""A watch on a namespace's pods that records when each pod (by UID) was first Running, Succeeded
or Failed, and waits for a condition on them without ever hanging silently: a broken watch, a
contender's controller that exits, or no progress for STALL seconds fail at once. A watch the
API server ends (it does so to a client slower than its events) is taken up again from the last
event seen."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kubernetes import watch

from cluster import Cluster

STALL = 120.0  # seconds without a single pod event while waiting: the benchmark cannot measure


class Stalled(RuntimeError):
    """The awaited state will not come: why, in words."""


class PodWatch:
    """Watches a namespace's pods from the moment it is made (before the measured action)."""

    def __init__(self, cluster: Cluster, ns: str, dead: Callable[[], str | None] = lambda: None):
        self.ns = ns
        self.running: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.failed: dict[str, float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.names: dict[str, str] = {}
        self.error: Exception | None = None
        self._dead = dead  # why the contender's controller cannot act, or None
        self._last_event = time.monotonic()
        self._stop = threading.Event()
        self._w = watch.Watch()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(cluster,), daemon=True)
        self._thread.start()
        time.sleep(0.3)  # the watch is open before the measured action starts

    def _run(self, cluster: Cluster) -> None:
        try:
            self._stream(cluster)
        except Exception as exc:  # the stream also breaks when close() stops it: no error then
            if not self._stop.is_set():
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()

    def _stream(self, cluster: Cluster) -> None:
        for ev in self._w.stream(
            cluster.core.list_namespaced_pod, self.ns, _preload_content=False
        ):  # no timeout: the client watches again from the last resourceVersion when it ends
            now = time.monotonic()
            obj = ev["raw_object"] if "raw_object" in ev else ev["object"]
            meta, phase = obj["metadata"], (obj.get("status") or {}).get("phase")
            uid = meta["uid"]
            with self._cond:
                self._last_event = now
                self.labels[uid] = meta.get("labels") or {}
                self.names[uid] = meta["name"]
                seen = {"Running": self.running, "Succeeded": self.succeeded, "Failed": self.failed}
                if phase in seen:
                    seen[phase].setdefault(uid, now)
                self._cond.notify_all()
            if self._stop.is_set():
                return

    def wait(self, what: Callable[[], bool], doing: str, timeout: float = 900) -> None:
        """Wait until ``what()``; raise at once, naming ``doing``, if it cannot come."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not what():
                if self.error is not None:
                    raise Stalled(f"{doing}: the pod watch broke: {self.error!r}") from self.error
                dead = self._dead()
                now = time.monotonic()
                if dead:
                    raise Stalled(f"{doing}: {dead}")
                if now - self._last_event > STALL:
                    raise Stalled(f"{doing}: no pod changed in {STALL:.0f} s ({self.summary()})")
                if now > deadline:
                    raise Stalled(f"{doing}: not done in {timeout:.0f} s ({self.summary()})")
                self._cond.wait(timeout=1)

    def summary(self) -> str:
        """What the watch has seen, in a few words, for an error message."""
        return (
            f"{len(self.names)} pods seen in {self.ns}: {len(self.running)} Running, "
            f"{len(self.succeeded)} Succeeded, {len(self.failed)} Failed"
        )

    def wait_running(self, n: int, doing: str, timeout: float = 900) -> float:
        """Time (monotonic) when n pods had been seen Running."""
        self.wait(lambda: len(self.running) >= n, doing, timeout)
        return max(self.running.values())

    def close(self) -> None:
        self._stop.set()
        self._w.stop()
