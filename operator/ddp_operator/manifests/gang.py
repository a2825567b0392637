"""Gang scheduling: the group object a job's scheduler places all-or-nothing by (what each worker
pod carries to belong to it: ``builders.join_gang``). Pure: a JobSpec (and its first worker pod,
for the group's resources) in, manifests out.

- ``Kubernetes`` (the in-tree scheduler, 1.36+ with the GenericWorkload and GangScheduling feature
  gates): a ``scheduling.k8s.io/v1alpha2`` Workload with one gang pod group template and its
  PodGroup; pods point at the PodGroup through ``spec.schedulingGroup.podGroupName``.
- ``Coscheduling`` (scheduler-plugins): a ``scheduling.x-k8s.io/v1alpha1`` PodGroup (minMember,
  scheduleTimeoutSeconds, minResources); pods carry the label ``scheduling.x-k8s.io/pod-group``.
- ``Volcano``: a ``scheduling.volcano.sh/v1beta1`` PodGroup (minMember, queue, priorityClassName,
  minResources); pods carry the annotation ``scheduling.k8s.io/group-name``.

Every group object is controlled by the job (ownerReference), created before any pod and kept
across group restarts: a restarted group is all-or-nothing again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from ..model import constants as c
from ..model.jobspec import JobSpec
from .builders import job_object_meta

Manifest = dict[str, Any]

TEMPLATE = "workers"  # the Workload's one pod group template


@dataclass(frozen=True)
class GroupObject:
    """One object to create for the gang, with what the API calls need to address it."""

    group: str
    version: str
    plural: str
    manifest: Manifest

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    def describe(self) -> str:
        """``PodGroup x (scheduling.k8s.io/v1alpha2)``."""
        return f"{self.kind} {self.name} ({self.group}/{self.version})"


# The API each scheduler's objects live in, and what a cluster needs to serve it.
APIS = {
    c.GANG_KUBERNETES: (
        "scheduling.k8s.io",
        "v1alpha2",
        "kube-apiserver --runtime-config=scheduling.k8s.io/v1alpha2=true and the feature gates "
        "GenericWorkload and GangScheduling on the API server and the scheduler (Kubernetes 1.36+)",
    ),
    c.GANG_COSCHEDULING: (
        "scheduling.x-k8s.io",
        "v1alpha1",
        "scheduler-plugins (sigs.k8s.io/scheduler-plugins) with its PodGroup CRD",
    ),
    c.GANG_VOLCANO: (
        "scheduling.volcano.sh",
        "v1beta1",
        "Volcano (volcano.sh) with its PodGroup CRD",
    ),
}


def needs(scheduler: str) -> str:
    """What a cluster must run for this gang scheduler (for the condition when it does not)."""
    return APIS[scheduler][2]


def group_objects(job: JobSpec, pod: Mapping[str, Any]) -> list[GroupObject]:
    """The objects to create, in order, before the job's pods; none without a gang. ``pod`` is
    one worker pod: every worker requests the same, so the group's minimum resources are
    ``spec.nodes`` times its requests."""
    gang = job.gang
    if gang is None:
        return []
    api_group, version, _ = APIS[gang.scheduler]

    def obj(kind: str, name: str, spec: Manifest) -> GroupObject:
        meta = job_object_meta(job, name)
        manifest = {"apiVersion": f"{api_group}/{version}", "kind": kind, "metadata": meta}
        return GroupObject(api_group, version, kind.lower() + "s", {**manifest, "spec": spec})

    if gang.scheduler == c.GANG_KUBERNETES:
        policy: Manifest = {"schedulingPolicy": {"gang": {"minCount": job.nodes}}}
        if gang.topology_key:
            policy["schedulingConstraints"] = {"topology": [{"key": gang.topology_key}]}
        workload = {
            "controllerRef": {"apiGroup": c.GROUP, "kind": c.KIND, "name": job.name},
            "podGroupTemplates": [{"name": TEMPLATE, **policy}],
        }
        ref = {"workload": {"workloadName": job.name, "podGroupTemplateName": TEMPLATE}}
        return [
            obj("Workload", job.name, workload),
            obj("PodGroup", gang.group, {"podGroupTemplateRef": ref, **policy}),
        ]
    spec: Manifest = {"minMember": job.nodes}
    resources = min_resources(pod, job.nodes)
    if resources:
        spec["minResources"] = resources
    if gang.timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = gang.timeout_seconds
    if gang.queue:
        spec["queue"] = gang.queue
    priority = (pod.get("spec") or {}).get("priorityClassName")
    if gang.scheduler == c.GANG_VOLCANO and priority:
        spec["priorityClassName"] = priority
    return [obj("PodGroup", gang.group, spec)]


def min_resources(pod: Mapping[str, Any], count: int) -> dict[str, str]:
    """``count`` times what one pod requests (its containers' requests, a limit standing in for
    a missing request, as the API server defaults it)."""
    total: dict[str, Decimal] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, quantity in wanted.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(quantity)
    return {name: _quantity(value * count) for name, value in sorted(total.items())}


def _quantity(value: Decimal) -> str:
    """A quantity the API server parses: a plain decimal, milli-units for fractions."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"
