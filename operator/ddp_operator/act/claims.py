"""The objects a job needs under its names (its Service, its gang's group objects, its
NetworkPolicy, the ConfigMaps its pods take their env from (``job_configmap``: the host list
and attempt; ``worker_env``: the values common to every worker), its pods):
created when missing, and, when one exists already, checked to be the job's (its controller's
UID), never reused otherwise; and the ConfigMap of the job's former name dropped once no pod
of the job reads it (``job_configmap``).

A fresh group (every pod of an attempt) is checked first by a server-side dry run of one pod,
so a template the API server refuses for good (invalid, PodSecurity, a webhook) fails the job
before anything of it exists. Creating that pod for real instead saved one request per job but
no measurable time in S2 (bench/README.md), and left a Service to take back on refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..api.kube import Kube
from ..api.transport import NotServed
from ..decide import obstacles
from ..decide.failures import (
    GangUnavailable,
    InPlaceRefused,
    NameConflict,
    StepFailed,
    api_message,
    refuses_in_place,
)
from ..manifests import builders, gang, inplace_pod, job_configmap, netpol, worker_env
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import controller
from .steps import all_steps, step

Manifest = Mapping[str, Any]
# Pods built and being created at once (the API layer sends 32 requests at a time): the
# manifests of a group of thousands, 15 KB of memory each, never all live at once (4096
# workers: 62 MB, most of the operator's peak memory in S5, bench/README.md).
IN_FLIGHT = 64


async def check_owner(
    kube: Kube, job: JobSpec, kind: str, name: str, api: tuple[str, str, str] | None = None
) -> bool:
    """Raise NameConflict unless the job is the controller of the existing object; False if it
    is gone meanwhile (the next pass creates it)."""
    return await owned(kube, job, kind, name, api) is not None


async def owned(
    kube: Kube, job: JobSpec, kind: str, name: str, api: tuple[str, str, str] | None = None
) -> dict[str, Any] | None:
    """The existing object's metadata, if the job is its controller (NameConflict if not); None
    if it is gone meanwhile."""
    meta = await step(f"reading {kind} {name}", kube.read_metadata(kind, job.namespace, name, api))
    if meta is not None:
        _the_jobs(job, f"{kind} {name}", meta)
    return meta


def _the_jobs(job: JobSpec, what: str, meta: Mapping[str, Any]) -> None:
    """NameConflict unless the job is the controller of the object ``meta`` describes."""
    uid, owner = controller(meta)
    if uid != job.uid:
        reason, message = obstacles.conflict_of(job, [what], owner)
        raise NameConflict(message, previous_job=reason == "WaitingForPreviousJob")


async def create_group(
    kube: Kube,
    job: JobSpec,
    build: Callable[[int], Manifest],
    indices: Sequence[int],
    fresh: bool,
    policy: bool = False,
    legacy: bool = False,
    resume: dict[str, str] | None = None,
) -> tuple[list[bool], bool]:
    """Create the gang's objects, the Service, the ConfigMaps (and keep the legacy one in step if
    ``legacy``), the NetworkPolicy if ``policy``, then the pods that ``build`` makes for
    ``indices`` (all of a new attempt's if ``fresh``: one is checked first); one that exists
    already must be the job's. Which pods were created (False: the job's exists), and False if
    an object went meanwhile (the next pass creates it)."""
    first = build(indices[0])
    if fresh:
        await check(kube, first)
    found = await create_gang(kube, job, first)
    if not await step("creating the Service", kube.create_service(builders.build_service(job))):
        found = await check_owner(kube, job, "Service", job.name) and found
    attempt = int(first["metadata"]["labels"][c.LABEL_ATTEMPT])
    found = await give_env(kube, job, attempt, legacy, common=True, resume=resume) and found
    if policy:
        manifest, name = netpol.build_network_policy(job), netpol.name(job)
        if not await step(
            f"creating {netpol.KIND} {name}", kube.create_object(*netpol.API, manifest)
        ):
            found = await check_owner(kube, job, netpol.KIND, name, netpol.API) and found
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def create(index: int) -> bool:  # built only once its turn comes
        async with gate:
            return await kube.create_pod(build(index))

    names = [builders.worker_name(job, i) for i in indices]
    created = await all_steps(
        (f"creating pod {name}", create(i)) for name, i in zip(names, indices, strict=True)
    )
    for name, ok in zip(names, created, strict=True):
        if not ok:  # a pod of that name exists: the job's (the watch lags) or someone else's
            found = await check_owner(kube, job, "Pod", name) and found
    return created, found


async def give_env(
    kube: Kube,
    job: JobSpec,
    attempt: int,
    legacy: bool = False,
    common: bool = False,
    resume: dict[str, str] | None = None,
) -> bool:
    """Have the job's ConfigMap (``job_configmap``), and the legacy one if ``legacy`` (a pod of
    the job reads it), hold the host list of the group's size and say ``attempt`` and where to
    ``resume`` (created if missing, else changed), and if ``common``, have its ConfigMap of
    common values (``worker_env``: created if missing; immutable, named after its content,
    nothing to give), before a pod that reads them is created or told its next attempt: their
    containers take them as they start. False if one went meanwhile (the next pass creates it)."""
    hosts = builders.worker_hosts(job)
    names = [job_configmap.name(job.name)]
    if legacy:
        names.append(job_configmap.legacy_name(job.name))
    found = True
    for name in names:
        meta = builders.job_object_meta(job, name)
        manifest = job_configmap.build(meta, job.nodes, hosts, attempt, resume)
        found = await _give(kube, job, manifest, attempt) and found
    if common:
        name = worker_env.name(job)
        manifest = worker_env.build(builders.job_object_meta(job, name), job)
        if not await step(f"creating ConfigMap {name}", kube.create_configmap(manifest)):
            found = await check_owner(kube, job, "ConfigMap", name) and found
    return found


async def _give(kube: Kube, job: JobSpec, manifest: Manifest, attempt: int) -> bool:
    """Create the ConfigMap ``manifest``, or give its data to the job's existing one: a
    compare-and-set on what was read (as a pod's tell is), never moving its attempt back (a
    replica behind the job's status is refused: StepFailed, on the job)."""
    name = manifest["metadata"]["name"]
    what = f"ConfigMap {name}"
    for _ in range(3):  # again if it went, or changed, between the read and the write
        if await step(f"creating {what}", kube.create_configmap(manifest)):
            return True
        found = await step(f"reading {what}", kube.read_configmap(job.namespace, name))
        if found is None:
            continue
        meta = found.get("metadata") or {}
        _the_jobs(job, what, meta)
        given = str((found.get("data") or {}).get(c.ENV_ATTEMPT, ""))
        if given.isdigit() and int(given) > attempt:
            behind = Exception(f"it says attempt {given}, later: this replica is behind the job")
            raise StepFailed(f"giving attempt {attempt} to {what}", behind)
        patched = kube.patch_configmap(
            job.namespace, name, str(meta.get("uid")), manifest["data"], meta.get("resourceVersion")
        )
        if await step(f"giving attempt {attempt} to {what}", patched):
            return True
    return False


async def drop_legacy_env(kube: Kube, job: JobSpec) -> None:
    """Delete the legacy ConfigMap (``job_configmap.legacy_name``) once no pod of the job reads
    it, if the job controls it (its UID a precondition); one that another controls is not the
    job's business any more, and is left alone."""
    name = job_configmap.legacy_name(job.name)
    meta = await step(
        f"reading ConfigMap {name}", kube.read_metadata("ConfigMap", job.namespace, name)
    )
    if meta is not None and controller(meta)[0] == job.uid:
        uid = str(meta.get("uid"))
        await step(f"deleting ConfigMap {name}", kube.delete_configmap(job.namespace, name, uid))


async def check(kube: Kube, pod: Manifest) -> None:
    """Let the API server check a pod (dry run): InPlaceRefused if it refuses, or drops, what
    an in-place pod carries; StepFailed for any other refusal."""
    what = f"checking pod {pod['metadata']['name']} (dry run)"
    try:
        checked = await kube.dry_run_pod(pod)
    except Exception as exc:
        if inplace_pod.carried(pod) and refuses_in_place(exc):
            raise InPlaceRefused(f"{what}: {api_message(exc)}") from exc
        raise StepFailed(what, exc) from exc
    if checked is not None and inplace_pod.carried(pod) and not inplace_pod.carried(checked):
        raise InPlaceRefused(
            f"{what}: the API server dropped the restartPolicyRules (its "
            "RestartAllContainersOnContainerExits feature gate is off)"
        )


async def create_gang(kube: Kube, job: JobSpec, pod: Mapping[str, Any]) -> bool:
    """Create (or find, the job's) the gang's group objects, before any pod of the group:
    GangUnavailable if the cluster does not serve their API. False if one went meanwhile."""
    found = True
    for obj in gang.group_objects(job, pod):
        api = (obj.group, obj.version, obj.plural)
        try:
            created = await kube.create_object(*api, obj.manifest)
        except NotServed as exc:
            assert job.gang is not None
            raise GangUnavailable(
                f"creating {obj.describe()}: {exc}; gang scheduling with scheduler "
                f"{job.gang.scheduler} needs {gang.needs(job.gang.scheduler)}"
            ) from exc
        except Exception as exc:
            raise StepFailed(f"creating {obj.describe()}", exc) from exc
        if not created:
            found = await check_owner(kube, job, obj.kind, obj.name, api) and found
    return found
