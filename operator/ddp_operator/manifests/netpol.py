"""The job's NetworkPolicy (pure): only the job's own pods reach its pods, on every port.

PyTorch's c10d store and rendezvous accept anyone who connects (PyTorch's SECURITY.md), and the
process group listens on ports beyond the master port, so the policy covers every port of the
job's pods. Ingress only: egress (the data, the checkpoints, DNS) is the user's. What the user
opens besides (``spec.network.allow``, NetworkPolicy ingress rules: a metrics scraper, a
TensorBoard reader) is added as it is. The policy selects by the job's name label, like the
Service: in Kubernetes, labels are what a NetworkPolicy knows of a pod.

It is named ``<job>-ddp-isolation``, not after the job: in a namespace that denies by default,
users write their own policy for a job, often named after it. Releases up to 0.2.0 named it
after the job; such a job keeps that policy (the job's, garbage-collected with it), and one of
its groups created since gets this one beside it: the same rules (``spec.network`` is
immutable), and policies only add up, so the two isolate as one."""

from __future__ import annotations

from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from .builders import job_object_meta

API = ("networking.k8s.io", "v1", "networkpolicies")
KIND = "NetworkPolicy"
SUFFIX = "-ddp-isolation"


def name(job: JobSpec) -> str:
    """The name of the job's NetworkPolicy: ``<job>-ddp-isolation``."""
    return f"{job.name}{SUFFIX}"


def isolated(job: JobSpec, default: bool) -> bool:
    """Whether the job gets its NetworkPolicy: ``spec.network.isolation``, else the operator's
    default (``--network-isolation``, on unless the chart turns it off)."""
    return default if job.network_isolation is None else job.network_isolation


def build_network_policy(job: JobSpec) -> dict[str, Any]:
    """NetworkPolicy ``<job>-ddp-isolation``: ingress to the job's pods from its own pods (any
    port) and from what ``spec.network.allow`` lists."""
    pods = {"matchLabels": {c.LABEL_JOB: job.name}}  # the job's pods, as its Service selects
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": KIND,
        "metadata": job_object_meta(job, name(job)),
        "spec": {
            "podSelector": pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": pods}]}, *map(dict, job.network_allow)],
        },
    }
