"""A namespace's worker pods, watched from a background thread that outlives API outages.

``PodWatch`` lists the pods, then watches from the list's resourceVersion; on any watch error
it lists again. Errors an outage brings (connection refused or reset, timeouts, 5xx, 429, an
expired watch) are expected: they are counted in ``transient`` (the last ones kept in
``last_transient``) and retried after a short sleep,
for at most ``max_outage`` seconds in a row. Any other error (a 4xx, a bug in a subclass) stops
the thread and is raised by ``stop()`` and ``check()``: nothing is swallowed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import urllib3
from kubernetes import client, config, watch

from .cluster import Cluster

LABEL_JOB = "ddp-operator.io/job-name"
LABEL_INDEX = "ddp-operator.io/worker-index"
LABEL_ATTEMPT = "ddp-operator.io/created-in-attempt"
TRANSIENT_STATUS = {0, 408, 410, 429, 500, 502, 503, 504}


def is_transient(exc: BaseException) -> bool:
    """Whether an API call's error is what an API server outage or an expired watch brings."""
    if isinstance(exc, client.ApiException):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def worker_key(pod: dict[str, Any]) -> tuple[str, int, int] | None:
    """(job, index, attempt) of a worker pod, from its labels; None for any other pod."""
    labels = pod["metadata"].get("labels") or {}
    try:
        return labels[LABEL_JOB], int(labels[LABEL_INDEX]), int(labels[LABEL_ATTEMPT])
    except (KeyError, ValueError):
        return None


class PodWatch:
    """Base class: subclasses get ``relisted(pods)`` after each list and ``changed(type, pod)``
    for each watch event (pods as dicts, only those labelled with a job name)."""

    def __init__(self, cluster: Cluster, ns: str, max_outage: float = 180.0):
        self.ns = ns
        self.max_outage = max_outage
        self.api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.error: BaseException | None = None
        self.transient = 0
        self.last_transient: list[str] = []
        self.lists = 0
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self._threads = [threading.Thread(target=self._guard, args=(self._loop,), daemon=True)]

    def relisted(self, pods: list[dict[str, Any]]) -> None:
        """All job pods of the namespace, as listed (after a start or a watch error)."""

    def changed(self, type_: str, pod: dict[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""

    def start(self) -> PodWatch:
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        """Stop the threads; raise the error that stopped one, if any."""
        self._stopped.set()
        if self._watch:
            self._watch.stop()
        for t in self._threads:
            t.join(timeout)
            assert not t.is_alive(), f"{type(self).__name__} thread did not stop in {timeout}s"
        self.api.close()
        self.check()

    def check(self) -> None:
        """Raise the error that stopped a thread, if any (call it often to fail fast)."""
        if self.error is not None:
            raise AssertionError(f"{type(self).__name__} in {self.ns} failed") from self.error

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _guard(self, body: Any) -> None:
        try:
            body()
        except BaseException as exc:  # recorded, raised again by stop() and check()
            self.error = exc
            self._stopped.set()

    def retry(self, exc: BaseException, since: float | None) -> float:
        """Record a transient error and sleep a little; raise if the outage lasts too long or
        the error is not transient. Returns when the outage began."""
        if not is_transient(exc):
            raise exc
        now = time.monotonic()
        since = now if since is None else since
        self.transient += 1
        note = f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {exc}"
        self.last_transient = [*self.last_transient[-19:], note[:300]]
        if now - since > self.max_outage:
            raise AssertionError(f"API server unreachable for {now - since:.0f}s") from exc
        self._stopped.wait(0.5)
        return since

    def _loop(self) -> None:
        outage: float | None = None
        while not self.stopped:
            try:
                listed = self.core.list_namespaced_pod(
                    self.ns, label_selector=LABEL_JOB, _request_timeout=(5, 30)
                )
                self.lists += 1
                self.relisted(self.api.sanitize_for_serialization(listed.items))
                outage = None
                version = listed.metadata.resource_version
                while not self.stopped:
                    self._watch = watch.Watch()
                    for event in self._watch.stream(
                        self.core.list_namespaced_pod,
                        self.ns,
                        label_selector=LABEL_JOB,
                        resource_version=version,
                        timeout_seconds=30,
                        _request_timeout=(5, 60),
                        deserialize=False,
                    ):
                        obj = event["object"]
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            self.changed(event["type"], obj)
                        version = obj.get("metadata", {}).get("resourceVersion") or version
                        if self.stopped:
                            break
            except Exception as exc:
                if self.stopped:
                    return
                outage = self.retry(exc, outage)
