"""The job-level Kueue Workload the operator makes for a job MultiKueue runs on another cluster
(``spec.managedBy: kueue.x-k8s.io/multikueue``; ``decide/kueue_workload``). Pure.

One pod set (``workers``) of ``spec.nodes`` pods, whose template is worker 0's pod as the
operator builds it, so that Kueue counts every container's requests, the operator's own
included. The job is its controller: MultiKueue finds the job (and its adapter) through that
reference, and the Workload goes with the job. Its spec never changes after creation: MultiKueue
would take a change for a new Workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from .builders import build_worker_pod, job_labels, owner_reference

Manifest = dict[str, Any]


def build(job: JobSpec) -> Manifest:
    """Workload ``job.queue.group`` in the job's LocalQueue."""
    if job.queue is None:
        raise ValueError(f"job {job.name} names no LocalQueue")
    pod = build_worker_pod(job, 0, in_place=job.restart_strategy == c.RESTART_IN_PLACE)
    meta = pod["metadata"]
    template = {
        "metadata": {
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        },
        "spec": pod["spec"],
    }
    pod_set: dict[str, Any] = {"name": c.KUEUE_POD_SET, "count": job.nodes, "template": template}
    if request := topology_request(job.template):
        pod_set["topologyRequest"] = request
    return {
        "apiVersion": "/".join(c.KUEUE_WORKLOAD_API[:2]),
        "kind": "Workload",
        "metadata": {
            "name": job.queue.group,
            "namespace": job.namespace,
            "labels": job_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "queueName": job.queue.name,
            "podSets": [pod_set],
        },
    }


def placed_by_kueue(template: Mapping[str, Any], workload: str) -> dict[str, Any]:
    """A pod template Kueue's topology-aware scheduling places: gated until Kueue lifts its
    gate with the node of each pod (by its worker index, ``topology_request``), and naming its
    Workload and pod set, by which Kueue finds the pods."""
    meta = dict(template.get("metadata") or {})
    annotations = {**(meta.get("annotations") or {}), c.KUEUE_WORKLOAD_ANNOTATION: workload}
    if not {c.KUEUE_REQUIRED_TOPOLOGY, c.KUEUE_PREFERRED_TOPOLOGY} & annotations.keys():
        annotations[c.KUEUE_UNCONSTRAINED_TOPOLOGY] = "true"
    labels = {**(meta.get("labels") or {}), c.KUEUE_POD_SET_LABEL: c.KUEUE_POD_SET}
    spec = dict(template.get("spec") or {})
    gates = list(spec.get("schedulingGates") or ())
    spec["schedulingGates"] = [*gates, {"name": c.KUEUE_TOPOLOGY_GATE}]
    return {
        **template,
        "metadata": {**meta, "annotations": annotations, "labels": labels},
        "spec": spec,
    }


def topology_request(template: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod set's topology request, from Kueue's annotations on the job's template: ranks
    placed in order of their worker index."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    for key, field_ in (
        (c.KUEUE_REQUIRED_TOPOLOGY, "required"),
        (c.KUEUE_PREFERRED_TOPOLOGY, "preferred"),
    ):
        if annotations.get(key):
            return {field_: annotations[key], "podIndexLabel": c.LABEL_INDEX}
    return None
