"""The job's ConfigMap ``<job>-ddp-env``: what its workers read from it (``configMapKeyRef``,
resolved by the kubelet each time a container starts) rather than carry in their pods. Pure.

* ``VC_WORKER_HOSTS``: every worker's name, a value that grows with the group. Carried in each
  pod it made a group weigh N^2 (56 KB of a 58 KB pod at 2048 workers) in the API server, etcd
  and every watcher; one ConfigMap of the job holds it once. One key per group size
  (``VC_WORKER_HOSTS.<nodes>``) whose value never changes: a pod reads the list of the group it
  was created for, as it did when the value was its own, also when an elastic job has changed
  size since and the pod restarts in place.
* ``DDP_ATTEMPT``: the attempt the group runs; in-place pods take it from here (``inplace_pod``),
  as their attempt moves on without a new pod. Recreate's pods carry their attempt.
* ``DDP_RESUME_STEP``, ``DDP_RESUME_PATH``: the job's last checkpoint when the group was last
  created or told its attempt (``decide/checkpoints``), absent before the first; every worker
  reads them (``optional``) as its trainer starts, written with ``DDP_ATTEMPT`` in one update
  (the in-place watch waits for that update: ``inplace_pod``).

The ConfigMap is the job's (its controller), created before the first pod that reads it; one of
its name that another owns is a NameConflict, never adopted (``claims.give_env``). The suffix
keeps the job's name free for the user's own ConfigMap of scripts or settings (a habit Kubeflow
users bring); the job's name is at most 54 characters (its pods' hostnames), so the name fits
a ConfigMap's 253 and even a DNS label's 63.

Operators built between 0.2.0 (which had no ConfigMap) and this change named it after the job
(``legacy_name``). A job created by one keeps pods whose containers read that one at each
(re)start, so while one of its own pods not being deleted reads it (``legacy_in_use``) the
operator keeps both in step: every attempt it gives is written to both, and a pod it creates
reads the new one. Once none does (its group was recreated), the old one is deleted if the job
controls it (``claims.drop_legacy_env``); one that another controls is left alone, as the job
no longer needs that name. The job loop sees that moment (a pass that saw a reader, then one
that sees none): an operator that was down across it leaves the old one to go with the job,
rather than read every job's ConfigMaps once to find out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model import constants as c
from ..model.workers import WorkerPod

Manifest = dict[str, Any]

HOSTS_ENV = c.ENV_HOSTS
SUFFIX = "-ddp-env"


def name(job: str) -> str:
    """The name of job ``job``'s ConfigMap: ``<job>-ddp-env``."""
    return f"{job}{SUFFIX}"


def legacy_name(job: str) -> str:
    """Its name in builds after 0.2.0 before the suffix (the job's own), still read by the pods
    of jobs created by them."""
    return job


def legacy_in_use(job: str, pods: Iterable[WorkerPod]) -> bool:
    """Whether one of the job's own ``pods`` not being deleted reads the legacy ConfigMap: a
    container of it may still (re)start and read it."""
    old = legacy_name(job)
    return any(p.env_configmap == old and not p.deleting for p in pods)


def hosts_key(nodes: int) -> str:
    """The key of the host list of a group of ``nodes`` workers."""
    return f"{HOSTS_ENV}.{nodes}"


def key_env(name: str, configmap: str, key: str) -> Manifest:
    """Env var ``name`` from ``key`` of ConfigMap ``configmap``."""
    return {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": key}}}


def hosts_env(configmap: str, nodes: int) -> Manifest:
    """``VC_WORKER_HOSTS`` of a pod of a group of ``nodes``."""
    return key_env(HOSTS_ENV, configmap, hosts_key(nodes))


def attempt_env(configmap: str) -> Manifest:
    """``DDP_ATTEMPT`` of an in-place pod: the attempt when its container (re)starts."""
    return key_env(c.ENV_ATTEMPT, configmap, c.ENV_ATTEMPT)


def resume_env(configmap: str) -> list[Manifest]:
    """``DDP_RESUME_STEP`` and ``DDP_RESUME_PATH`` of a worker: unset until the job has a
    checkpoint (the keys are optional)."""
    refs = [{"name": configmap, "key": n, "optional": True} for n in c.RESUME_ENV]
    return [{"name": r["key"], "valueFrom": {"configMapKeyRef": r}} for r in refs]


def data(
    nodes: int, hosts: str, attempt: int, resume: dict[str, str] | None = None
) -> dict[str, str]:
    """What the ConfigMap holds for a group of ``nodes`` (``hosts``: their names) at ``attempt``,
    ``resume`` being where it resumes (``checkpoints.resume_data``)."""
    return {c.ENV_ATTEMPT: str(attempt), hosts_key(nodes): hosts, **(resume or {})}


def build(
    meta: Manifest, nodes: int, hosts: str, attempt: int, resume: dict[str, str] | None = None
) -> Manifest:
    """The ConfigMap (``meta``: the job's owned-object metadata, with its name)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": data(nodes, hosts, attempt, resume),
    }


def lookup(entry: Manifest, configmap: str, values: dict[str, str]) -> str | None:
    """The value of an env entry taken from ``configmap`` (``values``: its data), as the kubelet
    would resolve it; None for an entry that is not."""
    ref = (entry.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return values.get(ref.get("key", "")) if ref.get("name") == configmap else None
