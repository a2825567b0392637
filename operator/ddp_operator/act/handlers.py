"""kopf wiring, kept thin: watch DDPJobs and hand them to the job loops.

The loops' pods come from ``podwatch`` (a list and a watch per namespace with jobs), not from
kopf: kopf's handling of each pod event was most of the operator's CPU. No handler here writes
anything: the per-job loops in ``runner`` do.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator
from typing import Any

import kopf

from ..api import metrics, progress_server
from ..api.kube import Kube
from ..api.nodewatch import NodeHealth
from ..api.progress_server import TokenReviewer
from ..api.transport import api_client
from ..decide import report_gate
from ..decide.failures import classify
from ..manifests.helpers_pod import MODES, Delivery
from ..model import constants as c
from ..model import jobspec, node_health
from . import workload_steps
from .progress_desk import ProgressDesk
from .registry import Runners
from .standby import standby

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


class RetryForever:
    """The delays (seconds) kopf waits between retries of a failed API request. kopf gives up
    after its own list (54 s in all), and a watch that gives up stops the whole operator: an
    API server down a minute, or two short outages in a row, ended it. Like client-go's
    reflectors, this retries for as long as the API server is away, 30 s apart at most. Only
    kopf's own requests (watches, its finalizer) use it; the job loops' calls fail into the
    job's status as before."""

    def __iter__(self) -> Iterator[float]:
        return itertools.chain((1, 1, 2, 3, 5, 8, 13, 21), itertools.repeat(30))


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
    settings.peering.lifetime = int(memo.get("peering_lifetime", 60))
    settings.watching.server_timeout = 600
    settings.watching.client_timeout = 660
    settings.networking.error_backoffs = RetryForever()
    concurrency = int(memo.get("api_concurrency", 32))
    runners.kube = Kube(api_client(pool_size=concurrency * 2), concurrency=concurrency)
    runners.clusterwide = bool(memo.get("clusterwide"))
    runners.isolation = bool(memo.get("network_isolation", True))
    markers = memo.get("broken_node_markers")
    marked = node_health.DEFAULT_MARKERS if markers is None else markers
    share = float(memo.get("taint_blamed_nodes") or 0.0)
    runners.nodes = NodeHealth(runners.kube, node_health.parse_all(marked), share)
    if memo.get("helpers_image"):
        runners.helpers = Delivery(memo["helpers_image"], memo.get("helpers_delivery") or MODES[0])
    if memo.get("metrics_port"):
        metrics.serve(int(memo["metrics_port"]), runners.phases)
    if memo.get("progress_address"):
        desk = ProgressDesk(runners.kube, runners)
        runners.on_forget.append(desk.forget)
        runners.progress_url = memo.get("progress_url")
        trusted = report_gate.networks(memo.get("progress_trusted") or ())
        reviewer = TokenReviewer(runners.kube, runners.worker, trusted)
        memo.progress_server = await progress_server.serve(
            memo["progress_address"], reviewer, desk.accept, lambda: not standby.paused()
        )
    runners.paused = standby.paused
    memo.standby = asyncio.create_task(standby.follow(runners.pause), name="standby")


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("standby"):
        memo.standby.cancel()
    await runners.close()
    if memo.get("progress_server"):
        await memo.progress_server.cleanup()


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def job_changed(
    type: str | None, body: kopf.Body, namespace: str, name: str, **_: Any
) -> None:
    """A DDPJob appeared, changed or was deleted: start, wake or stop its loop. One that
    another controller manages (``spec.managedBy``, immutable) is left entirely to it."""
    key = (namespace, name)
    if type == "DELETED":
        await runners.forget(key)
    elif jobspec.managed_here(body):
        runners.observe(key, body)
    elif jobspec.sent_away(body) and runners.kube is not None:
        await send_away(runners.kube, body)


async def send_away(kube: Kube, body: kopf.Body) -> None:
    """A job MultiKueue runs on another cluster: only its Workload is made here (its status is
    MultiKueue's, copied from there); an error says so in an Event on the job."""
    try:
        await workload_steps.send(kube, jobspec.resolve(body))
    except Exception as exc:  # the job's Events are where its user looks
        failure = classify(exc)
        kopf.event(body, type="Warning", reason=failure.reason, message=failure.message)


@kopf.on.event(*c.KUEUE_WORKLOAD_API, when=lambda body, **_: bool(_job_of(body)))
async def workload_changed(body: kopf.Body, namespace: str, **_: Any) -> None:
    """A job-level Workload of a DDPJob changed (Kueue admitted or evicted it): wake its job's
    loop; one of a job MultiKueue runs elsewhere gives its quota back once evicted."""
    name = _job_of(body)
    if runners.poke((namespace, name)) or runners.kube is None:
        return
    try:
        await workload_steps.release_sent(runners.kube, namespace, body)
    except Exception as exc:  # on the job's Events, where its user looks
        failure = classify(exc)
        job = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"namespace": namespace, "name": name},
        }
        kopf.event(job, type="Warning", reason=failure.reason, message=failure.message)


def _job_of(body: kopf.Body) -> str:
    """The DDPJob controlling a Workload ('' if none does)."""
    for owner in body.get("metadata", {}).get("ownerReferences") or ():
        if (
            owner.get("controller")
            and owner.get("kind") == c.KIND
            and owner.get("apiVersion") == c.API_VERSION
        ):
            return str(owner.get("name") or "")
    return ""
