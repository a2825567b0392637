"""How a group of workers stands: which workers of the current attempt failed, and whether the
job's success policy is met. Pure."""

from __future__ import annotations

from collections.abc import Collection

from ..manifests.builders import worker_name
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod


def _phase(pod: WorkerPod, attempt: int) -> str:
    """The pod's phase in ``attempt``: an in-place pod yet to restart for it has not ended in it,
    whatever its trainer did in the attempt before."""
    return "Running" if pod.watching and pod.attempt_now < attempt else pod.phase


def failures(
    job: JobSpec,
    current: dict[int, WorkerPod],
    created: bool,
    seen: Collection[tuple[str, int]],
    attempt: int,
    excused: Collection[tuple[str, int]] = (),
) -> dict[int, str]:
    """The workers of this attempt that failed, vanished or are being removed, by index: what
    happened. A missing worker has vanished if the whole group had been created, or if its pod
    of this attempt was seen before (``seen``: (pod name, attempt)); else it is yet to be
    created. One whose pod Kueue removed, or that is being replaced (``excused``), has not."""
    found: dict[int, str] = {}
    for i in range(job.nodes):
        pod = current.get(i)
        if pod is None:
            if (worker_name(job, i), attempt) in excused:
                continue
            if created or (worker_name(job, i), attempt) in seen:
                found[i] = f"{worker_name(job, i)} was deleted"
        elif _phase(pod, attempt) == "Failed" or (
            pod.failed_in_place and pod.attempt_now == attempt
        ):
            found[i] = pod.describe_end()
        elif pod.deleting and pod.phase != "Succeeded" and pod.node_lost:
            found[i] = f"{pod.name} was lost with its node {pod.node} ({pod.node_lost})"
        elif pod.deleting and pod.phase != "Succeeded":
            found[i] = f"{pod.name} is being deleted (evicted, preempted or removed)"
    return found


def succeeded(job: JobSpec, current: dict[int, WorkerPod], attempt: int) -> str | None:
    """The success reason, if the success policy is met in ``attempt``."""
    if job.success_policy == c.SUCCESS_WORKER0:
        worker0 = current.get(0)
        return "Worker0Succeeded" if worker0 and _phase(worker0, attempt) == "Succeeded" else None
    if all(i in current and _phase(current[i], attempt) == "Succeeded" for i in range(job.nodes)):
        return "AllWorkersSucceeded"
    return None
