"""Pure builders: a resolved DDPJob in, Kubernetes manifests (plain dicts) out. No I/O."""

from __future__ import annotations

import copy
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec, SpecError
from . import job_configmap, termination, watchdogs
from .inplace_pod import make_in_place

Manifest = dict[str, Any]


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


def build_env(job: JobSpec, index: int, attempt: int = 0) -> list[Manifest]:
    """The env contract of worker ``index`` (see the README's table), in a stable order; the
    host list from the job's ConfigMap (``job_configmap``), the rest as values."""
    master = master_addr(job)
    nprocs = job.procs_per_node
    devices = job.accelerator.per_node if job.accelerator else nprocs
    conf = [f"{k}={v}" for k, v in job.rdzv_conf]
    env: list[tuple[str, str]] = [
        ("MASTER_ADDR", master),
        ("MASTER_PORT", str(job.master_port)),
        ("NNODES", str(job.nodes)),
        ("NODE_RANK", str(index)),
        ("NPROC_PER_NODE", str(nprocs)),
        ("WORLD_SIZE", str(job.world_size)),
    ]
    if nprocs == 1:
        env += [("RANK", str(index)), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")]
    if job.elastic:
        lo, hi = job.node_bounds
        env.append(("PET_NNODES", f"{lo}:{hi}"))
    else:
        env.append(("PET_NNODES", str(job.nodes)))
    env += [
        ("PET_NODE_RANK", str(index)),
        ("PET_NPROC_PER_NODE", str(nprocs)),
        ("PET_MASTER_ADDR", master),
        ("PET_MASTER_PORT", str(job.master_port)),
    ]
    if job.elastic:
        env += [
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", f"{master}:{job.master_port}"),
            ("PET_RDZV_ID", job.uid or job.name),
            # torchrun hosts the c10d store where the endpoint names the local host; a pod's
            # canonical name is its FQDN, so say explicitly which worker hosts it.
            ("PET_RDZV_CONF", ",".join([f"is_host={'1' if index == 0 else '0'}", *conf])),
        ]
    env += [
        (c.ENV_BACKEND, job.backend),
        (c.ENV_JOB_NAME, job.name),
        (c.ENV_ATTEMPT, str(attempt)),
        ("MA_NUM_HOSTS", str(job.nodes)),
        ("MA_NUM_GPUS", str(devices)),
        ("MA_TASK_NAME", c.WORKER_ROLE),
        ("MA_VJ_NAME", job.name),
        ("VC_TASK_INDEX", str(index)),
        ("VC_WORKER_NUM", str(job.nodes)),
    ]
    built: list[Manifest] = [{"name": k, "value": v} for k, v in env]
    built.append(job_configmap.hosts_env(job_configmap.name(job.name), job.nodes))
    if job.accelerator and job.accelerator.is_ascend:
        built.append({"name": "HCCL_IF_BASE_PORT", "value": str(job.accelerator.hccl_base_port)})
        if job.accelerator.hccl_connect_timeout:
            timeout = str(job.accelerator.hccl_connect_timeout)
            built.append({"name": "HCCL_CONNECT_TIMEOUT", "value": timeout})
    return built


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


def _defaults(job: JobSpec) -> list[tuple[str, str]]:
    """Env the user may set otherwise: unbuffered output, PyTorch's NCCL watchdogs
    (``watchdogs``), and for elastic jobs torchrun's own
    restarts (each lost node costs every agent one) and a rendezvous store set up anew each
    round (torch's shared store leaves a node that joins a later round waiting for an address
    no one writes again: seen in real pods, torch 2.15)."""
    env = [("PYTHONUNBUFFERED", "1"), *watchdogs.env(job)]
    if job.elastic:
        env += [
            ("PET_MAX_RESTARTS", str(c.ELASTIC_MAX_RESTARTS)),
            ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
        ]
    return env


def _merge_env(
    job: JobSpec, user_env: list[dict[str, Any]], ours: list[Manifest]
) -> list[dict[str, Any]]:
    # Ours first, so user entries may reference them with $(VAR); reserved user names are refused
    # by the CRD, and dropped here for manifests that bypassed it.
    taken = {e["name"] for e in ours}
    user = [e for e in user_env if e.get("name") not in taken]
    named = {e.get("name") for e in user}
    ours = ours + [{"name": k, "value": v} for k, v in _defaults(job) if k not in named]
    return [*ours, *user]


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


def join_queue(job: JobSpec, labels: dict[str, str], annotations: dict[str, str]) -> None:
    """Make a worker pod a member of the job's Kueue pod group: the same group name and total
    count on every worker, so that Kueue admits (and evicts) the group whole."""
    if job.queue is None:
        return
    labels[c.KUEUE_QUEUE_LABEL] = job.queue.name
    labels[c.KUEUE_GROUP_LABEL] = job.queue.group
    if job.queue.priority_class:
        labels[c.KUEUE_PRIORITY_LABEL] = job.queue.priority_class
    annotations[c.KUEUE_TOTAL_ANNOTATION] = str(job.nodes)


def build_worker_pod(
    job: JobSpec, index: int, attempt: int = 0, in_place: bool = False
) -> Manifest:
    """Pod ``<job>-worker-<index>`` of the given restart attempt; ``in_place``: one the kubelet
    can restart where it stands (``inplace_pod``)."""
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
    join_queue(job, labels, annotations)

    at = trainer_index(pod_spec)
    trainer = pod_spec["containers"][at]
    trainer["env"] = _merge_env(job, trainer.get("env") or [], build_env(job, index, attempt))
    ports = trainer.setdefault("ports", [])
    if not any(p.get("containerPort") == job.master_port for p in ports):
        ports.append({"name": "rendezvous", "containerPort": job.master_port})
    _add_resources(trainer, job)
    termination.add(trainer)
    _add_shm(pod_spec, trainer, job)
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
