"""A DDPJob's spec with every default resolved: the one input of the builders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import constants as c


class SpecError(ValueError):
    """A spec the CRD should have refused; raised when a manifest bypassed the API server."""


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
    """Admission by Kueue: the workers are one pod group (``group``, also the name of Kueue's
    Workload) in LocalQueue ``name``."""

    name: str
    group: str
    priority_class: str | None = None


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


def _opt_int(spec: Mapping[str, Any], key: str) -> int | None:
    value = spec.get(key)
    return None if value is None else int(value)


def resolve(body: Mapping[str, Any]) -> JobSpec:
    """Resolve a DDPJob object into a JobSpec; SpecError, naming the problem, if it cannot be."""
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
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    name = meta.get("name") or ""
    if not name:
        raise SpecError("metadata.name is required")

    acc_raw = spec.get("accelerator")
    accelerator = None
    if acc_raw:
        accelerator = Accelerator(
            resource=str(acc_raw["resource"]),
            per_node=int(acc_raw.get("perNode", 1)),
            hccl_base_port=int(acc_raw.get("hcclBasePort", c.DEFAULT_HCCL_BASE_PORT)),
            hccl_connect_timeout=_opt_int(acc_raw, "hcclConnectTimeout"),
        )
        if accelerator.per_node < 1:
            raise SpecError("spec.accelerator.perNode must be at least 1")

    nodes = int(spec.get("nodes", 1))
    if nodes < 1:
        raise SpecError("spec.nodes must be at least 1")

    procs = spec.get("procsPerNode", "auto")
    if procs in (None, "auto"):
        procs_per_node = accelerator.per_node if accelerator else 1
    else:
        procs_per_node = int(procs)
        if procs_per_node < 1:
            raise SpecError("spec.procsPerNode must be at least 1 or 'auto'")
        if accelerator and accelerator.per_node % procs_per_node:
            raise SpecError("spec.procsPerNode must divide spec.accelerator.perNode")

    backend = spec.get("backend") or "auto"
    if backend == "auto":
        backend = default_backend(accelerator)
    network = spec.get("network") or {}

    return JobSpec(
        name=name,
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid") or "",
        nodes=nodes,
        procs_per_node=procs_per_node,
        backend=backend,
        master_port=int(spec.get("masterPort", c.DEFAULT_MASTER_PORT)),
        accelerator=accelerator,
        template=spec.get("template") or {},
        backoff_limit=int(spec.get("backoffLimit", c.DEFAULT_BACKOFF_LIMIT)),
        suspend=bool(spec.get("suspend", False)),
        active_deadline_seconds=_opt_int(spec, "activeDeadlineSeconds"),
        ttl_seconds_after_finished=_opt_int(spec, "ttlSecondsAfterFinished"),
        clean_pod_policy=spec.get("cleanPodPolicy") or c.CLEAN_RUNNING,
        success_policy=spec.get("successPolicy") or c.SUCCESS_ALL_WORKERS,
        min_nodes=_opt_int(spec, "minNodes"),
        max_nodes=_opt_int(spec, "maxNodes"),
        shm_size=spec.get("shmSize"),
        scheduler_name=spec.get("schedulerName"),
        gang=_gang(spec.get("gangScheduling"), name),
        queue=_queue(meta, name),
        restart_strategy=_restart_strategy(spec),
        rdzv_conf=tuple(sorted((str(k), str(v)) for k, v in (spec.get("rdzvConf") or {}).items())),
        network_isolation=network.get("isolation"),
        network_allow=tuple(network.get("allow") or ()),
    )


def _restart_strategy(spec: Mapping[str, Any]) -> str:
    strategy = spec.get("restartStrategy") or c.RESTART_IN_PLACE
    if strategy not in (c.RESTART_IN_PLACE, c.RESTART_RECREATE):
        raise SpecError(
            f"spec.restartStrategy must be {c.RESTART_IN_PLACE} or {c.RESTART_RECREATE}, "
            f"not {strategy!r}"
        )
    return str(strategy)


# What each scheduler's group object can express beyond its minimum (the CRD says the same).
GANG_OPTIONS = {
    c.GANG_KUBERNETES: ("topologyKey",),
    c.GANG_COSCHEDULING: ("timeoutSeconds",),
    c.GANG_VOLCANO: ("queue",),
}


def _gang(raw: Mapping[str, Any] | None, name: str) -> Gang | None:
    if raw is None:
        return None
    scheduler = raw.get("scheduler") or c.GANG_KUBERNETES
    if scheduler not in GANG_OPTIONS:
        raise SpecError(
            f"spec.gangScheduling.scheduler must be one of {', '.join(GANG_OPTIONS)}, "
            f"not {scheduler!r}"
        )
    for option in ("topologyKey", "timeoutSeconds", "queue"):
        if raw.get(option) is not None and option not in GANG_OPTIONS[scheduler]:
            raise SpecError(
                f"spec.gangScheduling.{option} is not supported by scheduler {scheduler}"
            )
    return Gang(
        scheduler=scheduler,
        group=raw.get("podGroup") or name,
        timeout_seconds=_opt_int(raw, "timeoutSeconds"),
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
    uid = str(meta.get("uid") or "")[:8]
    group = f"{name[: 62 - len(uid)]}-{uid}" if uid else name[:63]
    return Queue(name=queue, group=group, priority_class=labels.get(c.KUEUE_PRIORITY_LABEL))
