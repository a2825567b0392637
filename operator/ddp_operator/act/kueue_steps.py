"""What the job loop does with Kueue through the API (the decisions are ``kueue``'s): read why
Kueue holds a group, mark pods so that Kueue ends a group, take Kueue's finalizer off the job's
ended workers. Each is a step of a plan: its error says which one it was."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..api.kube import Kube
from ..decide import kueue
from ..decide.failures import api_message
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .steps import all_steps, step

log = logging.getLogger(__name__)


async def holdup(kube: Kube, job: JobSpec, pods: Iterable[WorkerPod]) -> kueue.Holdup | None:
    """Why Kueue holds the job's group, from its Workload, while it holds any worker."""
    if job.queue is None or not kueue.waiting(job, pods):
        return None
    group = job.queue.group
    workload = await step(
        f"reading Kueue's Workload {group}",
        kube.read_object(c.KUEUE_WORKLOAD_API, job.namespace, group),
    )
    return kueue.holdup(workload)


async def mark(kube: Kube, namespace: str, pods: Iterable[WorkerPod]) -> None:
    """Mark pods ``retriable-in-group: "false"``: Kueue then ends their group."""
    await all_steps(
        (
            f"marking pod {p.name} for Kueue",
            kube.annotate_pod(namespace, p.name, p.uid, kueue.UNRETRIABLE),
        )
        for p in pods
    )


async def release(kube: Kube, namespace: str, pods: Iterable[WorkerPod]) -> None:
    """Take Kueue's finalizer off pods (each checked by UID and the finalizer's place)."""
    await all_steps(
        (
            f"taking Kueue's finalizer off pod {p.name}",
            kube.remove_finalizer(namespace, p.name, p.uid, p.finalizers, c.KUEUE_FINALIZER),
        )
        for p in pods
    )


async def mark_left_behind(
    kube: Kube, namespace: str, job: str, uid: str | None, pods: Iterable[WorkerPod]
) -> None:
    """Once the job is deleted: mark the pods Kueue still holds, so that it lets them go. There
    is no job left to report on, so a failure is logged."""
    for pod in kueue.left_behind(uid, pods):
        try:
            await kube.annotate_pod(namespace, pod.name, pod.uid, kueue.UNRETRIABLE)
        except Exception as exc:
            log.warning(
                "ddpjob %s/%s: marking pod %s for Kueue: %s",
                namespace,
                job,
                pod.name,
                api_message(exc),
            )
