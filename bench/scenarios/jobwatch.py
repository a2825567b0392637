"""A watch on a namespace's job objects (any contender's) recording when each first had its
"finished well" condition."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import watch

from contenders.base import Contender
from podwatch import Stalled


class WatchThread:
    """A watch of custom objects streamed in a thread of its own: each event goes to ``seen``;
    an error that breaks the stream is kept (``error``) for the waits to raise; ``close`` ends
    it quietly."""

    def __init__(self, cluster: Any, ns: str, api: tuple[str, str, str], **selectors: Any):
        self.error: Exception | None = None
        self._w = watch.Watch()
        self._stop = threading.Event()
        self._args = (cluster.custom.list_namespaced_custom_object, api[0], api[1], ns, api[2])
        self._selectors = selectors
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def seen(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:  # no timeout: the client watches again from the last resourceVersion if it ends
            for ev in self._w.stream(*self._args, **self._selectors):
                self.seen(ev)
                if self._stop.is_set():
                    return
        except Exception as exc:  # close() breaks the stream too: no error then
            if not self._stop.is_set():
                self.error = exc

    def close(self) -> None:
        self._stop.set()
        self._w.stop()


class JobWatch(WatchThread):
    """When each job of ``ct`` in ``ns`` got its ``ct.done`` condition True."""

    def __init__(self, ct: Contender, ns: str) -> None:
        assert ct.job_api is not None
        self.ct, self.ns = ct, ns
        self.done: dict[str, float] = {}
        super().__init__(ct.cluster, ns, ct.job_api)

    def seen(self, event: dict[str, Any]) -> None:
        now, obj = time.monotonic(), event["object"]
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond["type"] == self.ct.done and cond["status"] == "True":
                self.done.setdefault(obj["metadata"]["name"], now)

    def wait(self, n: int, doing: str, timeout: float = 600) -> None:
        """Wait until n jobs are done; fail at once if the watch or the controller broke."""
        deadline = time.monotonic() + timeout
        while len(self.done) < n:
            if self.error is not None:
                raise Stalled(f"{doing}: the job watch broke: {self.error!r}") from self.error
            if dead := self.ct.dead():
                raise Stalled(f"{doing}: {dead}")
            if time.monotonic() > deadline:
                raise Stalled(
                    f"{doing}: {len(self.done)} of {n} jobs {self.ct.done} after {timeout:.0f} s"
                )
            time.sleep(0.05)
