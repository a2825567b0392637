"""A DDPJob's spec with every default resolved: the one input of the builders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import constants as c
from . import failure_policy, stall_detection


class SpecError(ValueError):
    """A spec the CRD should have refused; raised when a manifest bypassed the API server.
    ``errors``: every problem found, each naming its field (the message joins them)."""

    def __init__(self, *errors: str):
        super().__init__("; ".join(errors))
        self.errors = list(errors)


@dataclass(frozen=True)
class Accelerator:
    """An extended resource requested per node (a GPU or NPU count)."""

    resource: str
    per_node: int
    hccl_base_port: int = c.DEFAULT_HCCL_BASE_PORT
    hccl_connect_timeout: int | None = None

    @property
    def is_ascend(self) -> bool:
        return self.resource.startswith(c.ASCEND_PREFIX)

    @property
    def is_nvidia(self) -> bool:
        return self.resource == c.NVIDIA_GPU


@dataclass(frozen=True)
class Gang:
    """All-or-nothing placement by one scheduler: its group object is ``group``, minimum the
    job's node count."""

    scheduler: str  # c.GANG_KUBERNETES, c.GANG_COSCHEDULING or c.GANG_VOLCANO
    group: str
    timeout_seconds: int | None = None
    queue: str | None = None
    topology_key: str | None = None


@dataclass(frozen=True)
class Queue:
    """Admission by Kueue in LocalQueue ``name``: the workers are one pod group (``group``, also
    the name of the Workload Kueue makes of it), or, with ``workload`` (a job-level Workload:
    ``decide/kueue_workload``), the job is admitted whole through that Workload and its pods
    carry nothing of Kueue's."""

    name: str
    group: str
    priority_class: str | None = None
    workload: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """Resolved spec of one DDPJob."""

    name: str
    namespace: str
    uid: str
    nodes: int
    procs_per_node: int
    backend: str
    master_port: int
    accelerator: Accelerator | None
    template: Mapping[str, Any]
    backoff_limit: int = c.DEFAULT_BACKOFF_LIMIT
    suspend: bool = False
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: str = c.CLEAN_RUNNING
    success_policy: str = c.SUCCESS_ALL_WORKERS
    min_nodes: int | None = None
    max_nodes: int | None = None
    shm_size: str | None = None
    scheduler_name: str | None = None
    gang: Gang | None = None
    queue: Queue | None = None
    restart_strategy: str = c.RESTART_IN_PLACE
    rdzv_conf: tuple[tuple[str, str], ...] = ()  # spec.rdzvConf: torchrun's rendezvous options
    network_isolation: bool | None = None  # spec.network.isolation; None: the operator's default
    network_allow: tuple[Mapping[str, Any], ...] = ()  # spec.network.allow: ingress rules
    helpers: bool = True  # spec.helpers.enabled: the operator's helpers in its workers
    failure_policy: failure_policy.FailurePolicy = field(
        default_factory=failure_policy.FailurePolicy
    )
    stall_detection: stall_detection.StallDetection = field(
        default_factory=stall_detection.StallDetection
    )

    @property
    def kind_name(self) -> str:
        """``DDPJob/<name>``, as owner references are described."""
        return f"{c.KIND}/{self.name}"

    @property
    def elastic(self) -> bool:
        return self.min_nodes is not None or self.max_nodes is not None

    @property
    def node_bounds(self) -> tuple[int, int]:
        """The rendezvous' (min, max) nodes: spec.minNodes and spec.maxNodes, or spec.nodes."""
        return (self.min_nodes or self.nodes, self.max_nodes or self.nodes)

    @property
    def scalable(self) -> bool:
        """Elastic with room (minNodes < maxNodes), outside a gang or a queue (they place and
        admit the group whole): a lost worker other than 0 is replaced alone (``elastic``)."""
        lo, hi = self.node_bounds
        return lo < hi and self.gang is None and self.queue is None

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node


def default_backend(accelerator: Accelerator | None) -> str:
    """nccl for NVIDIA GPUs, hccl for Ascend NPUs, gloo otherwise."""
    if accelerator is None:
        return c.BACKEND_GLOO
    if accelerator.is_ascend:
        return c.BACKEND_HCCL
    if accelerator.is_nvidia:
        return c.BACKEND_NCCL
    return c.BACKEND_GLOO


class _Errors(list[str]):
    """The problems found so far; a field that is not what it must be reads as ``default``."""

    def int(self, raw: Mapping[str, Any], key: str, path: str, default: Any, least: int | None):
        value = raw.get(key, default)
        if value is None:
            return None
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.append(f"{path} must be an integer, not {value!r}")
            return default
        if least is not None and number < least:
            self.append(f"{path} must be at least {least}")
            return default
        return number

    def one_of(self, raw: Mapping[str, Any], key: str, path: str, allowed: tuple[str, ...]):
        """The value of ``key``, or ``allowed[0]`` (the default) if unset or not allowed."""
        value = raw.get(key) or allowed[0]
        if value not in allowed:
            self.append(f"{path} must be one of {', '.join(allowed)}, not {value!r}")
            return allowed[0]
        return str(value)


def sent_away(body: Mapping[str, Any]) -> bool:
    """Whether MultiKueue runs the job on another cluster (``spec.managedBy``
    ``kueue.x-k8s.io/multikueue``): here the operator only makes its Workload."""
    return (body.get("spec") or {}).get("managedBy") == c.MULTIKUEUE


def managed_here(body: Mapping[str, Any]) -> bool:
    """Whether this operator runs the job: its ``spec.managedBy`` unset or ours
    (``constants.MANAGED_BY``)."""
    manager = (body.get("spec") or {}).get("managedBy")
    return manager in (None, "", c.MANAGED_BY)


def resolve(body: Mapping[str, Any]) -> JobSpec:
    """Resolve a DDPJob object into a JobSpec; SpecError, naming every problem, if it cannot
    be."""
    try:
        return _resolve(body)
    except SpecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecError(f"the DDPJob's spec cannot be read ({type(exc).__name__}: {exc})") from exc


def _resolve(body: Mapping[str, Any]) -> JobSpec:
    """Resolve a DDPJob object (as stored, or as written in a file) into a JobSpec.

    Applies the same defaults as the CRD schema and re-checks the few rules the builders rely
    on, so a manifest that never went through the API server (``kubectl ddp local``) is safe.
    Every problem is found before any is raised (``kubectl ddp submit`` lists them all).
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    errors = _Errors()
    name = meta.get("name") or ""
    if not name:
        errors.append("metadata.name is required")

    acc_raw = spec.get("accelerator")
    accelerator = None
    if acc_raw:
        at = "spec.accelerator"
        if not acc_raw.get("resource"):
            errors.append(f"{at}.resource is required")
        accelerator = Accelerator(
            resource=str(acc_raw.get("resource") or ""),
            per_node=errors.int(acc_raw, "perNode", f"{at}.perNode", 1, 1),
            hccl_base_port=errors.int(
                acc_raw, "hcclBasePort", f"{at}.hcclBasePort", c.DEFAULT_HCCL_BASE_PORT, 1
            ),
            hccl_connect_timeout=errors.int(
                acc_raw, "hcclConnectTimeout", f"{at}.hcclConnectTimeout", None, 1
            ),
        )

    nodes = errors.int(spec, "nodes", "spec.nodes", 1, 1)
    procs = spec.get("procsPerNode", "auto")
    if procs in (None, "auto"):
        procs_per_node = accelerator.per_node if accelerator else 1
    else:
        try:
            procs_per_node = int(procs)
        except (TypeError, ValueError):
            procs_per_node = 0
        if procs_per_node < 1:
            errors.append(f"spec.procsPerNode must be at least 1 or 'auto', not {procs!r}")
            procs_per_node = 1
        elif accelerator and accelerator.per_node % procs_per_node:
            errors.append("spec.procsPerNode must divide spec.accelerator.perNode")

    backend = errors.one_of(spec, "backend", "spec.backend", BACKENDS)
    if backend == "auto":
        backend = default_backend(accelerator)
    network = spec.get("network") or {}
    restart_strategy = errors.one_of(spec, "restartStrategy", "spec.restartStrategy", RESTARTS)
    gang = _gang(spec.get("gangScheduling"), name, errors)
    job = JobSpec(
        name=name,
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid") or "",
        nodes=nodes,
        procs_per_node=procs_per_node,
        backend=backend,
        master_port=errors.int(spec, "masterPort", "spec.masterPort", c.DEFAULT_MASTER_PORT, 1),
        accelerator=accelerator,
        template=spec.get("template") or {},
        backoff_limit=errors.int(
            spec, "backoffLimit", "spec.backoffLimit", c.DEFAULT_BACKOFF_LIMIT, 0
        ),
        suspend=bool(spec.get("suspend", False)),
        active_deadline_seconds=errors.int(
            spec, "activeDeadlineSeconds", "spec.activeDeadlineSeconds", None, 1
        ),
        ttl_seconds_after_finished=errors.int(
            spec, "ttlSecondsAfterFinished", "spec.ttlSecondsAfterFinished", None, 0
        ),
        clean_pod_policy=errors.one_of(spec, "cleanPodPolicy", "spec.cleanPodPolicy", CLEANUPS),
        success_policy=errors.one_of(spec, "successPolicy", "spec.successPolicy", SUCCESSES),
        min_nodes=errors.int(spec, "minNodes", "spec.minNodes", None, 1),
        max_nodes=errors.int(spec, "maxNodes", "spec.maxNodes", None, 1),
        shm_size=spec.get("shmSize"),
        scheduler_name=spec.get("schedulerName"),
        gang=gang,
        queue=_queue(meta, name),
        restart_strategy=restart_strategy,
        rdzv_conf=tuple(sorted((str(k), str(v)) for k, v in (spec.get("rdzvConf") or {}).items())),
        network_isolation=network.get("isolation"),
        network_allow=tuple(network.get("allow") or ()),
        helpers=(spec.get("helpers") or {}).get("enabled") is not False,
        failure_policy=failure_policy.resolve(spec.get("failurePolicy"), errors),
        stall_detection=stall_detection.resolve(spec.get("stallDetection"), errors),
    )
    if errors:
        raise SpecError(*errors)
    return job


# What the CRD's enums allow, the default first.
BACKENDS = ("auto", c.BACKEND_NCCL, c.BACKEND_HCCL, c.BACKEND_GLOO, "mpi")
CLEANUPS = (c.CLEAN_RUNNING, c.CLEAN_ALL, c.CLEAN_NONE)
SUCCESSES = (c.SUCCESS_ALL_WORKERS, c.SUCCESS_WORKER0)
RESTARTS = (c.RESTART_IN_PLACE, c.RESTART_RECREATE)

# What each scheduler's group object can express beyond its minimum (the CRD says the same).
GANG_OPTIONS = {
    c.GANG_KUBERNETES: ("topologyKey",),
    c.GANG_COSCHEDULING: ("timeoutSeconds",),
    c.GANG_VOLCANO: ("queue",),
}


def _gang(raw: Mapping[str, Any] | None, name: str, errors: _Errors) -> Gang | None:
    if raw is None:
        return None
    scheduler = raw.get("scheduler") or c.GANG_KUBERNETES
    if scheduler not in GANG_OPTIONS:
        errors.append(
            f"spec.gangScheduling.scheduler must be one of {', '.join(GANG_OPTIONS)}, "
            f"not {scheduler!r}"
        )
    for option in ("topologyKey", "timeoutSeconds", "queue"):
        if raw.get(option) is not None and option not in GANG_OPTIONS.get(scheduler, (option,)):
            errors.append(f"spec.gangScheduling.{option} is not supported by scheduler {scheduler}")
    timeout = "spec.gangScheduling.timeoutSeconds"
    return Gang(
        scheduler=scheduler,
        group=raw.get("podGroup") or name,
        timeout_seconds=errors.int(raw, "timeoutSeconds", timeout, None, 1),
        queue=raw.get("queue"),
        topology_key=raw.get("topologyKey"),
    )


def _queue(meta: Mapping[str, Any], name: str) -> Queue | None:
    """Kueue's pod group of a job labelled with a LocalQueue. The group is named after the job
    and its UID, so that a job deleted and applied again never meets the old group's Workload."""
    labels = meta.get("labels") or {}
    queue = labels.get(c.KUEUE_QUEUE_LABEL)
    if not queue:
        return None
    priority = labels.get(c.KUEUE_PRIORITY_LABEL)
    # MultiKueue's copy on a worker cluster: admitted through the Workload it names.
    prebuilt = (meta.get("annotations") or {}).get(c.KUEUE_PREBUILT) or labels.get(c.KUEUE_PREBUILT)
    if prebuilt:
        return Queue(name=queue, group=prebuilt, priority_class=priority, workload=prebuilt)
    uid = str(meta.get("uid") or "")[:8]
    group = f"{name[: 62 - len(uid)]}-{uid}" if uid else name[:63]
    return Queue(name=queue, group=group, priority_class=priority)
