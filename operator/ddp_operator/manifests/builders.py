"""Pure builders: a resolved DDPJob in, Kubernetes manifests (plain dicts) out. No I/O."""

from __future__ import annotations

import copy
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec, SpecError
from . import job_configmap, termination, watchdogs, worker_env
from .inplace_pod import make_in_place
from .names import master_addr as master_addr  # the names' builders, for builders' callers
from .names import worker_host as worker_host
from .names import worker_hosts as worker_hosts
from .names import worker_name

Manifest = dict[str, Any]


def job_labels(job: JobSpec) -> dict[str, str]:
    """Labels on every object of the job; the Service selects pods by these."""
    return {c.LABEL_JOB: job.name, c.LABEL_MANAGED_BY: c.MANAGER}


def owner_reference(job: JobSpec) -> Manifest:
    """Controller ownerReference to the DDPJob, so deleting the job cascades."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def trainer_index(pod_spec: dict[str, Any]) -> int:
    """Index of the trainer container: the one named ``trainer``, else the first."""
    containers = pod_spec.get("containers") or []
    for i, container in enumerate(containers):
        if container.get("name") == c.TRAINER_CONTAINER:
            return i
    return 0


def job_object_meta(job: JobSpec, name: str | None = None) -> Manifest:
    """Metadata of an object the job owns (its Service, NetworkPolicy, gang objects): named
    ``name`` (the job's name by default), the job's labels, the job as controller."""
    return {
        "name": name or job.name,
        "namespace": job.namespace,
        "labels": job_labels(job),
        "ownerReferences": [owner_reference(job)],
    }


def build_service(job: JobSpec) -> Manifest:
    """Headless Service ``<job>``: gives every worker a DNS name before it is ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": job_object_meta(job),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {c.LABEL_JOB: job.name},
            "ports": [
                {"name": "rendezvous", "port": job.master_port, "targetPort": job.master_port}
            ],
        },
    }


def _add_resources(container: dict[str, Any], job: JobSpec) -> None:
    if not job.accelerator:
        return
    resources = container.setdefault("resources", {})
    count = str(job.accelerator.per_node)
    resources.setdefault("limits", {})[job.accelerator.resource] = count
    resources.setdefault("requests", {})[job.accelerator.resource] = count


def _add_shm(pod_spec: dict[str, Any], container: dict[str, Any], job: JobSpec) -> None:
    mounts = container.setdefault("volumeMounts", [])
    if any(m.get("mountPath") == c.SHM_PATH for m in mounts):
        return  # the user brought their own /dev/shm
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if job.shm_size:
        empty_dir["sizeLimit"] = job.shm_size
    pod_spec.setdefault("volumes", []).append({"name": c.SHM_VOLUME, "emptyDir": empty_dir})
    mounts.append({"name": c.SHM_VOLUME, "mountPath": c.SHM_PATH})


def _add_hccl_ports(pod_spec: dict[str, Any], job: JobSpec) -> None:
    if not (job.accelerator and job.accelerator.is_ascend):
        return
    base = job.accelerator.hccl_base_port
    sysctls = pod_spec.setdefault("securityContext", {}).setdefault("sysctls", [])
    key = "net.ipv4.ip_local_reserved_ports"
    if not any(s.get("name") == key for s in sysctls):
        # Keeps HCCL's host ports away from ephemeral ports (in the kubelet's safe set).
        sysctls.append({"name": key, "value": f"{base}-{base + c.HCCL_PORT_COUNT - 1}"})


def _add_node_lost_tolerations(pod_spec: dict[str, Any]) -> None:
    tolerations = pod_spec.setdefault("tolerations", [])
    if any(not t.get("key") and t.get("operator") == "Exists" for t in tolerations):
        return  # the template tolerates every taint: its choice
    have = {t.get("key") for t in tolerations}
    for key in c.NODE_LOST_TAINTS:
        if key not in have:
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": c.NODE_LOST_GRACE_SECONDS,
                }
            )


def join_gang(
    job: JobSpec, labels: dict[str, str], annotations: dict[str, str], spec: dict[str, Any]
) -> None:
    """Make a worker pod a member of the job's gang (its group object: ``gang``) and send it to
    the gang's scheduler, unless spec.schedulerName names one."""
    gang = job.gang
    if gang is None:
        return
    if gang.scheduler == c.GANG_KUBERNETES:
        spec["schedulingGroup"] = {"podGroupName": gang.group}
    elif gang.scheduler == c.GANG_COSCHEDULING:
        labels[c.COSCHEDULING_LABEL] = gang.group
    else:
        annotations[c.VOLCANO_ANNOTATION] = gang.group
    scheduler_name = job.scheduler_name or c.GANG_SCHEDULER_NAMES[gang.scheduler]
    if scheduler_name:
        spec["schedulerName"] = scheduler_name


def join_queue(
    job: JobSpec, index: int, labels: dict[str, str], annotations: dict[str, str]
) -> None:
    """Make worker ``index`` a member of the job's Kueue pod group: the same group name and
    total count on every worker, so that Kueue admits (and evicts) the group whole, and its
    index, by which Kueue's topology-aware scheduling places ranks in order (neighbouring ranks
    on neighbouring nodes)."""
    if job.queue is None or job.queue.workload:
        return  # admitted whole through a job-level Workload (``kueue_workload``)
    labels[c.KUEUE_QUEUE_LABEL] = job.queue.name
    labels[c.KUEUE_GROUP_LABEL] = job.queue.group
    labels[c.KUEUE_INDEX_LABEL] = str(index)
    if job.queue.priority_class:
        labels[c.KUEUE_PRIORITY_LABEL] = job.queue.priority_class
    annotations[c.KUEUE_TOTAL_ANNOTATION] = str(job.nodes)


def build_worker_pod(
    job: JobSpec,
    index: int,
    attempt: int = 0,
    in_place: bool = False,
    resume: dict[str, str] | None = None,
) -> Manifest:
    """Pod ``<job>-worker-<index>`` of the given restart attempt; ``in_place``: one the kubelet
    can restart where it stands (``inplace_pod``); ``resume``: where it resumes
    (``checkpoints.resume_data``)."""
    template = copy.deepcopy(dict(job.template))
    meta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = template.get("spec") or {}
    if not pod_spec.get("containers"):
        raise SpecError("spec.template.spec.containers must name at least one container")

    labels = {**(meta.get("labels") or {}), **job_labels(job)}
    labels[c.LABEL_INDEX] = str(index)
    labels[c.LABEL_ATTEMPT] = str(attempt)
    annotations = dict(meta.get("annotations") or {})

    name = worker_name(job, index)
    pod_spec["hostname"] = name
    pod_spec["subdomain"] = job.name
    pod_spec["restartPolicy"] = "Never"  # the group restarts whole: recreated, or by the rules
    if job.scheduler_name:
        pod_spec["schedulerName"] = job.scheduler_name
    join_gang(job, labels, annotations, pod_spec)
    join_queue(job, index, labels, annotations)

    at = trainer_index(pod_spec)
    trainer = pod_spec["containers"][at]
    worker_env.give(trainer, job, index, attempt, in_place, resume)
    ports = trainer.setdefault("ports", [])
    if not any(p.get("containerPort") == job.master_port for p in ports):
        ports.append({"name": "rendezvous", "containerPort": job.master_port})
    _add_resources(trainer, job)
    termination.add(trainer)
    _add_shm(pod_spec, trainer, job)
    watchdogs.add_dump_volume(pod_spec, trainer, job)
    _add_hccl_ports(pod_spec, job)
    _add_node_lost_tolerations(pod_spec)

    metadata: Manifest = {
        "name": name,
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    if annotations:
        metadata["annotations"] = annotations
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    if in_place:
        make_in_place(pod, at, attempt, job_configmap.name(job.name))
    return pod
