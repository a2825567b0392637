"""A watch on a namespace's job objects (any contender's) recording when each first had its
"finished well" condition."""

from __future__ import annotations

import threading
import time

from kubernetes import watch

from contenders.base import Contender
from podwatch import Stalled


class JobWatch:
    """When each job of ``ct`` in ``ns`` got its ``ct.done`` condition True."""

    def __init__(self, ct: Contender, ns: str) -> None:
        assert ct.job_api is not None
        self.ct, self.ns = ct, ns
        self.done: dict[str, float] = {}
        self.error: Exception | None = None
        self._w = watch.Watch()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        group, version, plural = self.ct.job_api or ("", "", "")
        try:  # no timeout: the client watches again from the last resourceVersion if it ends
            for ev in self._w.stream(
                self.ct.cluster.custom.list_namespaced_custom_object,
                group,
                version,
                self.ns,
                plural,
            ):
                now, obj = time.monotonic(), ev["object"]
                for cond in (obj.get("status") or {}).get("conditions") or []:
                    if cond["type"] == self.ct.done and cond["status"] == "True":
                        self.done.setdefault(obj["metadata"]["name"], now)
                if self._stop.is_set():
                    return
        except Exception as exc:  # close() breaks the stream too: no error then
            if not self._stop.is_set():
                self.error = exc

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

    def close(self) -> None:
        self._stop.set()
        self._w.stop()
