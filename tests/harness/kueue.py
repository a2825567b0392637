"""Kueue's objects, as the tests make them on a cluster (Kueue running: ``kueue`` fixture)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .cluster import Cluster

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def apply(cluster: Cluster, kind: str, name: str, spec: dict, ns: str | None = None) -> None:
    """Apply (server-side) Kueue object ``kind`` ``name`` with ``spec``, in ``ns`` if given."""
    meta: dict[str, Any] = {"name": name, **({"namespace": ns} if ns else {})}
    manifest = {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": meta, "spec": spec}
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest))


def cluster_queue(
    ns: str, flavor: str, resources: Iterable[tuple[str, str]], checks: Iterable[str] = ()
) -> dict[str, Any]:
    """The spec of a ClusterQueue for namespace ``ns`` only: ``resources`` (name, quota) of one
    ``flavor``; ``checks``: its admission checks."""
    resources = list(resources)
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [
            {
                "coveredResources": [r for r, _ in resources],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [{"name": r, "nominalQuota": q} for r, q in resources],
                    }
                ],
            }
        ],
    }
    if checks := list(checks):
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in checks]}
    return spec
