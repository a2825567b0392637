"""The job's ConfigMap ``<job>``: what its workers read from it (``configMapKeyRef``, resolved by
the kubelet each time a container starts) rather than carry in their pods. Pure.

* ``VC_WORKER_HOSTS``: every worker's name, a value that grows with the group. Carried in each
  pod it made a group weigh N^2 (56 KB of a 58 KB pod at 2048 workers) in the API server, etcd
  and every watcher; one ConfigMap of the job holds it once. One key per group size
  (``VC_WORKER_HOSTS.<nodes>``) whose value never changes: a pod reads the list of the group it
  was created for, as it did when the value was its own, also when an elastic job has changed
  size since and the pod restarts in place.
* ``DDP_ATTEMPT``: the attempt the group runs; in-place pods take it from here (``inplace_pod``),
  as their attempt moves on without a new pod. Recreate's pods carry their attempt.

The ConfigMap is the job's (its controller), created before the first pod that reads it; one of
the job's name that another owns is a NameConflict, never adopted (``claims.give_env``).
"""

from __future__ import annotations

from typing import Any

from ..model import constants as c

Manifest = dict[str, Any]

HOSTS_ENV = "VC_WORKER_HOSTS"


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


def data(nodes: int, hosts: str, attempt: int) -> dict[str, str]:
    """What the ConfigMap holds for a group of ``nodes`` (``hosts``: their names) at ``attempt``."""
    return {c.ENV_ATTEMPT: str(attempt), hosts_key(nodes): hosts}


def build(meta: Manifest, nodes: int, hosts: str, attempt: int) -> Manifest:
    """The ConfigMap (``meta``: the job's owned-object metadata, named after the job)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": data(nodes, hosts, attempt),
    }


def lookup(entry: Manifest, configmap: str, values: dict[str, str]) -> str | None:
    """The value of an env entry taken from ``configmap`` (``values``: its data), as the kubelet
    would resolve it; None for an entry that is not."""
    ref = (entry.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return values.get(ref.get("key", "")) if ref.get("name") == configmap else None
