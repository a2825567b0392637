"""The names of a job's workers: pod names, DNS names, the rendezvous master. Pure."""

from __future__ import annotations

from ..model import constants as c
from ..model.jobspec import JobSpec


def worker_name(job: JobSpec, index: int) -> str:
    """Pod name (and hostname) of worker ``index``: ``<job>-worker-<index>``."""
    return f"{job.name}-{c.WORKER_ROLE}-{index}"


def worker_host(job: JobSpec, index: int) -> str:
    """DNS name of a worker inside the job's namespace: ``<job>-worker-<i>.<job>``."""
    return f"{worker_name(job, index)}.{job.name}"


def worker_hosts(job: JobSpec) -> str:
    """Every worker's DNS name, worker 0 first, comma-separated (``VC_WORKER_HOSTS``)."""
    return ",".join(worker_host(job, i) for i in range(job.nodes))


def master_addr(job: JobSpec) -> str:
    """Worker-0's DNS name: the rendezvous master."""
    return worker_host(job, 0)
