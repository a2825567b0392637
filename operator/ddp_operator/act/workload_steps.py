"""What the operator does with a job-level Kueue Workload through the API (the decisions are
``decide/kueue_workload``'s): on a worker cluster, read the Workload MultiKueue's copy of a job
names, make it the job's, and tell it when the job gave its quota back or ended; on the manager
cluster, make the Workload of a job MultiKueue runs elsewhere, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..api.kube import Kube
from ..decide import kueue_workload
from ..decide.conditions import condition
from ..decide.kueue_workload import Admission
from ..decide.plan import Plan
from ..manifests import kueue_workload as workload_manifest
from ..model import constants as c
from ..model.jobspec import JobSpec
from .steps import step

API = c.KUEUE_WORKLOAD_API


async def admission(kube: Kube, job: JobSpec) -> Admission | None:
    """What the job's Workload says (None: the job has none), the Workload made the job's
    first (NameConflict if another object controls it)."""
    if job.queue is None or not job.queue.workload:
        return None
    name = job.queue.workload
    workload = await step(
        f"reading Kueue's Workload {name}", kube.read_object(API, job.namespace, name)
    )
    if workload is not None and (patch := kueue_workload.adopt(job, workload)):
        uid = str((workload.get("metadata") or {}).get("uid") or "")
        what = f"making the job the controller of Kueue's Workload {name}"
        await step(what, kube.patch_object(API, job.namespace, name, uid, patch))
    found = kueue_workload.read(name, workload)
    if not found.admitted or not found.flavors:
        return found
    flavors = {
        f: await step(
            f"reading Kueue's ResourceFlavor {f}", kube.read_cluster_object(c.KUEUE_FLAVOR_API, f)
        )
        for f in found.flavors
    }
    return kueue_workload.placed(found, flavors)


async def settle(kube: Kube, job: JobSpec, found: Admission | None, plan: Plan) -> None:
    """After a pass: the Workload Finished once the job is over; its quota given back once an
    evicted job's pods are gone."""
    if found is None:
        return
    now = datetime.now(UTC)
    status: Mapping[str, Any] = plan.status
    ended = next(
        (
            (t == c.COND_SUCCEEDED, x)
            for t in (c.COND_SUCCEEDED, c.COND_FAILED)
            if (x := condition(status.get("conditions") or [], t)) and x.get("status") == "True"
        ),
        None,
    )
    if ended is not None:
        succeeded, cond = ended
        patch = kueue_workload.finish(found, succeeded, str(cond.get("message") or ""), now)
        what = f"marking Kueue's Workload {found.workload} Finished"
    else:
        patch = kueue_workload.release(found, len(plan.own), now)
        what = f"giving back the quota of Kueue's evicted Workload {found.workload}"
    if patch is not None:
        await step(what, kube.patch_object_status(API, job.namespace, found.workload, patch))


async def send(kube: Kube, job: JobSpec) -> None:
    """A job MultiKueue runs on another cluster: its Workload made, if it is not (MultiKueue
    copies the job there once Kueue admits it); its quota given back once Kueue evicted it (no
    pods run here)."""
    if job.queue is None:
        return
    name = job.queue.group
    workload = await step(
        f"reading Kueue's Workload {name}", kube.read_object(API, job.namespace, name)
    )
    if workload is None:
        what = f"creating Kueue's Workload {name}"
        await step(what, kube.create_object(*API, workload_manifest.build(job)))
        return
    kueue_workload.adopt(job, workload)  # NameConflict if another object controls it
    await release_sent(kube, job.namespace, workload)


async def release_sent(kube: Kube, namespace: str, workload: Mapping[str, Any]) -> None:
    """The Workload of a job MultiKueue runs elsewhere: its quota given back once Kueue
    evicted it (no pods run here), so that Kueue queues it again."""
    name = str((workload.get("metadata") or {}).get("name"))
    patch = kueue_workload.release(kueue_workload.read(name, workload), 0, datetime.now(UTC))
    if patch is not None:
        what = f"giving back the quota of Kueue's evicted Workload {name}"
        await step(what, kube.patch_object_status(API, namespace, name, patch))
