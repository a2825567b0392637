"""How a group of workers stands: whether the job's success policy is met (its failures:
``failure_facts``). Pure."""

from __future__ import annotations

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod


def phase(pod: WorkerPod, attempt: int) -> str:
    """The pod's phase in ``attempt``: an in-place pod yet to restart for it has not ended in it,
    whatever its trainer did in the attempt before."""
    return "Running" if pod.watching and pod.attempt_now < attempt else pod.phase


def succeeded(job: JobSpec, current: dict[int, WorkerPod], attempt: int) -> str | None:
    """The success reason, if the success policy is met in ``attempt``."""
    if job.success_policy == c.SUCCESS_WORKER0:
        worker0 = current.get(0)
        return "Worker0Succeeded" if worker0 and phase(worker0, attempt) == "Succeeded" else None
    if all(i in current and phase(current[i], attempt) == "Succeeded" for i in range(job.nodes)):
        return "AllWorkersSucceeded"
    return None
