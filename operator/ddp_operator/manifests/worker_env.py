"""The env of a worker's trainer container: the contract (the README's table) and where each
value lives. Pure.

The contract's values that are the same in every worker of the job (``MASTER_ADDR``, ``NNODES``,
``PET_MASTER_PORT``, ``MA_VJ_NAME``, ...) come from one ConfigMap of the job by ``envFrom``; a pod
carries only its own (ranks, attempt), the reference to its group's host list
(``job_configmap``) and our defaults. Each value written into every pod cost the API server
twice (the field and its ``managedFields`` entry: 5.4 KB of an 11 KB pod) and every watcher
once, which made a group of 2048 slower to create than JobSet's (bench/README.md, S5).

Scripts see what they saw: the kubelet gives a container's ``env`` precedence over its
``envFrom``, and a later ``envFrom`` over an earlier one, so ours, the last ``envFrom``, wins
over the template's own ``envFrom`` as our ``env`` entries did; the contract's names are refused
in the template's ``env`` (the CRD). Our defaults (``PYTHONUNBUFFERED``, ...) stay in the pod, so
that a template entry of the same name hides them exactly as before, even one that resolves to
nothing.

The ConfigMap is named after its content, ``<job>-ddp-common-<digest>``, and immutable: a pod
reads the values it was created with, whatever a later build of the operator would write (a new
build with other values makes another for the groups it creates); nobody can edit it, and the
kubelet need not watch it. Only values that never change in the job's life are shared (from
fields that cannot change: procsPerNode, backend, masterPort, accelerator, the name); an elastic
job's size (``NNODES``, ``WORLD_SIZE``, ``MA_NUM_HOSTS``, ``VC_WORKER_NUM``) stays in each pod,
which keeps the values of the size it was created for. The ConfigMap is the job's like its other
objects: created before a pod that reads it is created or restarted in place, created again if
deleted while the job runs (``decide/owned``), a NameConflict if another owns its name
(``act/claims``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import job_configmap, watchdogs
from .names import master_addr

Manifest = dict[str, Any]

SUFFIX = "-ddp-common"
PER_WORKER = frozenset(
    {"NODE_RANK", "RANK", "PET_NODE_RANK", "PET_RDZV_CONF", "VC_TASK_INDEX", c.ENV_ATTEMPT}
)
PER_SIZE = frozenset({"NNODES", "WORLD_SIZE", "MA_NUM_HOSTS", "VC_WORKER_NUM"})
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def name(job: JobSpec) -> str:
    """The name of the job's ConfigMap of common values: ``<job>-ddp-common-<digest>``, the
    digest of what it holds (``data``)."""
    content = json.dumps(sorted(data(job).items()), separators=(",", ":")).encode()
    return f"{job.name}{SUFFIX}-{hashlib.sha256(content).hexdigest()[:10]}"


def contract(job: JobSpec, index: int, attempt: int = 0) -> list[tuple[str, str]]:
    """The env contract of worker ``index`` in a stable order, every value as its processes see
    it, but ``VC_WORKER_HOSTS`` (``job_configmap``)."""
    master = master_addr(job)
    nprocs = job.procs_per_node
    devices = job.accelerator.per_node if job.accelerator else nprocs
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
        conf = [f"{k}={v}" for k, v in (*rdzv_defaults(job), *job.rdzv_conf)]
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
    if job.accelerator and job.accelerator.is_ascend:
        env.append(("HCCL_IF_BASE_PORT", str(job.accelerator.hccl_base_port)))
        if job.accelerator.hccl_connect_timeout:
            env.append(("HCCL_CONNECT_TIMEOUT", str(job.accelerator.hccl_connect_timeout)))
    return env


def defaults(job: JobSpec) -> list[tuple[str, str]]:
    """Env the template's ``env`` may set otherwise, the same in every worker: unbuffered
    output, and for elastic jobs torchrun's own restarts (each lost node costs every agent one)
    and a rendezvous store set up anew each round (torch's shared store leaves a node that joins
    a later round waiting for an address no one writes again: seen in real pods, torch 2.15)."""
    env = [("PYTHONUNBUFFERED", "1")]
    if job.elastic:
        env += [
            ("PET_MAX_RESTARTS", str(c.ELASTIC_MAX_RESTARTS)),
            ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
        ]
    return env


def shared(job: JobSpec, key: str) -> bool:
    """Whether the contract's value ``key`` is the same in every pod the job ever has."""
    return key not in PER_WORKER and not (job.elastic and key in PER_SIZE)


def data(job: JobSpec) -> dict[str, str]:
    """What the job's ConfigMap of common values holds."""
    return {k: v for k, v in contract(job, 0) if shared(job, k)}


def build(meta: Manifest, job: JobSpec) -> Manifest:
    """The ConfigMap (``meta``: the job's owned-object metadata, named ``name(job)``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": data(job),
        "immutable": True,
    }


def give(
    trainer: Manifest,
    job: JobSpec,
    index: int,
    attempt: int,
    in_place: bool = False,
    resume: Mapping[str, str] | None = None,
) -> None:
    """Give the trainer container of worker ``index`` its env: its own values and our defaults
    first (so that the template's entries may refer to them as ``$(VAR)``; a default the
    template names is left out), the template's after, and the job's common values as its last
    ``envFrom``. A template entry named like one of the contract's (refused by the CRD; a
    manifest that bypassed it) is dropped, so the contract's value wins. Where to resume
    (``DDP_RESUME_*``) is a default too: a pod restarted in place reads it from the job's
    ConfigMap at each start (its attempt moves on without a new pod); any other carries
    ``resume``, the job's checkpoint when it was created (none before the first)."""
    values = contract(job, index, attempt)
    own: list[Manifest] = [{"name": k, "value": v} for k, v in values if not shared(job, k)]
    own.append(job_configmap.hosts_env(job_configmap.name(job.name), job.nodes))
    taken = {k for k, _ in values} | {c.ENV_HOSTS}
    user = [e for e in trainer.get("env") or [] if e.get("name") not in taken]
    named = {e.get("name") for e in user}
    settable = [*defaults(job), *watchdogs.env(job)]
    own += [{"name": k, "value": v} for k, v in settable if k not in named]
    if in_place:
        refs = job_configmap.resume_env(job_configmap.name(job.name))
        own += [e for e in refs if e["name"] not in named]
    else:
        own += [{"name": k, "value": v} for k, v in (resume or {}).items() if k not in named]
    trainer["env"] = [*own, *user]
    ours = {"configMapRef": {"name": name(job)}}
    trainer["envFrom"] = [*(trainer.get("envFrom") or []), ours]


def read_by(job: JobSpec, pods: Iterable[WorkerPod]) -> bool:
    """Whether one of the job's ``pods`` not being deleted reads its ConfigMap of common values
    as this build names it: a container of it may (re)start and read it."""
    common = name(job)
    return any(common in p.env_from and not p.deleting for p in pods)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` from ``env`` as the kubelet does: ``$$`` is a literal ``$``, and an
    undefined ``$(VAR)`` is left as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        var = m.group(1)
        return env[var] if var in env else m.group(0)

    return _VAR.sub(sub, text)


def resolve(
    container: Mapping[str, Any],
    configmaps: Mapping[str, Mapping[str, str]],
    base: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """A container's env as the kubelet resolves it over ``base``, ``configmaps`` (name: data)
    being the ConfigMaps it may read: ``envFrom`` in order (each prefixed as it says), then
    ``env`` in order, each value expanded over what came before. Also what could not be resolved
    here (a Secret, a field, a ConfigMap not given), left out."""
    env: dict[str, str] = dict(base or {})
    missing: list[str] = []
    for source in container.get("envFrom") or ():
        ref = source.get("configMapRef") or {}
        if ref.get("name") in configmaps:
            prefix = source.get("prefix") or ""
            env.update({prefix + k: v for k, v in configmaps[ref["name"]].items()})
        else:
            missing.append(f"envFrom ConfigMap {ref.get('name')}" if ref else f"envFrom {source}")
    for entry in container.get("env") or ():
        if "valueFrom" not in entry:
            env[entry["name"]] = expand(str(entry.get("value", "")), env)
            continue
        ref = entry["valueFrom"].get("configMapKeyRef") or {}
        value = configmaps.get(ref.get("name", ""), {}).get(ref.get("key", ""))
        if value is None and ref.get("optional") and ref.get("name") in configmaps:
            continue  # an optional key not there: the kubelet leaves the variable unset
        if value is None:
            missing.append(f"env {entry['name']} (valueFrom)")
        else:
            env[entry["name"]] = value
    return env, missing


def configmaps(job: JobSpec, attempt: int, hosts: str) -> dict[str, dict[str, str]]:
    """The job's ConfigMaps as the operator writes them at ``attempt`` (``hosts``: the group's
    host list), by name: what ``resolve`` reads for the job's pods."""
    return {
        name(job): data(job),
        job_configmap.name(job.name): job_configmap.data(job.nodes, hosts, attempt),
    }


# An elastic job's agents heartbeat once a second while it has at most this many nodes.
FAST_HEARTBEAT_MAX_NODES = 64


def rdzv_defaults(job: JobSpec) -> tuple[tuple[str, str], ...]:
    """Our rendezvous options for an elastic job, those ``spec.rdzvConf`` does not set.

    A lost agent stays a participant of the last round until its heartbeats are missed
    (``keep_alive_interval`` x ``keep_alive_max_attempt``, torch's 5 s x 3), and no new round
    forms meanwhile: a replacement that arrived at once still waited 10-15 s (S7's slow
    rounds). A heartbeat a second drops it within 3 s. Each heartbeat writes the rendezvous
    state, which grows with the nodes: above FAST_HEARTBEAT_MAX_NODES torch's default stays."""
    if job.node_bounds[1] > FAST_HEARTBEAT_MAX_NODES:
        return ()
    given = {k for k, _ in job.rdzv_conf}
    return tuple((k, v) for k, v in (("keep_alive_interval", "1"),) if k not in given)
