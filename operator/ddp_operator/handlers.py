"""kopf wiring, kept thin: watch DDPJobs and their pods, and hand them to the job loops.

kopf indexes the worker pods (and waits for that index to be complete before any handler
runs, so a restarted operator never mistakes an unseen pod for a lost one). No handler here
writes anything: the per-job loops in ``runner`` do.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from . import constants as c
from . import metrics
from .kube import Kube, api_client
from .registry import Runners
from .workers import observe

runners = Runners()


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf computes every event's "essence" (a deep copy) to detect spec changes for
    create/update handlers; this operator has none (it is level-triggered), so it skips that:
    28% of its CPU under load, measured with py-spy (bench/README.md)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Operator settings: our own annotation prefixes, quiet Events, an API client."""
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    # kopf waits this long for more events of the same object before handling them; our job
    # loops coalesce bursts themselves, so a short window only cuts latency.
    settings.batching.batch_window = 0.01
    # kopf keeps a worker task per object while events keep coming; ending them after 0.5 s of
    # quiet (instead of 5 s) cut the peak RSS of 200 jobs x 4 pods from 174 to 137 MB.
    settings.batching.idle_timeout = 0.5
    settings.watching.server_timeout = 600
    settings.watching.client_timeout = 660
    concurrency = int(memo.get("api_concurrency", 32))
    runners.kube = Kube(api_client(pool_size=concurrency * 2), concurrency=concurrency)
    if memo.get("metrics_port"):
        metrics.serve(int(memo["metrics_port"]), runners.phases)


@kopf.on.cleanup()
async def shutdown(**_: Any) -> None:
    await runners.close()


# The pod handlers are coroutines, though they do no I/O: kopf runs a plain function in a
# thread pool, which cost 6% of the operator's CPU at 512 pods (py-spy) and would call
# the loops' asyncio.Event from outside the event loop.


@kopf.index("pods", labels={c.LABEL_JOB: kopf.PRESENT})
async def worker_pods(body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> Any:
    """Index of worker pods by (namespace, job name), as WorkerPod summaries."""
    pod = observe(body)
    return {(namespace, labels[c.LABEL_JOB]): pod} if pod else None


@kopf.on.event("pods", labels={c.LABEL_JOB: kopf.PRESENT})
async def pod_changed(
    type: str | None, body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any
) -> None:
    """A worker pod changed: wake its job's loop (telling it of a pod that is gone)."""
    key = (namespace, labels[c.LABEL_JOB])
    if type == "DELETED":
        pod = observe(body)
        if pod is not None:
            runners.gone(key, pod)
    runners.poke(key)


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def job_changed(
    type: str | None, body: kopf.Body, namespace: str, name: str, worker_pods: kopf.Index, **_: Any
) -> None:
    """A DDPJob appeared, changed or was deleted: start, wake or stop its loop."""
    runners.index = worker_pods
    key = (namespace, name)
    if type == "DELETED":
        await runners.forget(key)
    else:
        runners.observe(key, body)
