"""A running job's owned objects kept as declared (``decide/owned``), in each pass of its loop:
the missing created again, the changed put back, and the job told (conditions, Warning Events)
through the pass's plan, which the loop then records. The watch (``api/ownedwatch``) wakes the
loop when one is deleted or changed: no polling."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from ..api.kube import Kube
from ..decide import owned
from ..decide.conditions import Conditions, format_time
from ..decide.failures import NameConflict, api_message
from ..decide.plan import Plan
from ..manifests import builders
from ..model.jobspec import JobSpec
from .claims import owned as controlled

Key = tuple[str, str]
Wanted = Sequence[tuple[owned.Api, str]]  # (api, kind) of each declared object
Source = Callable[[Key, Wanted], Awaitable[tuple[dict[owned.Name, dict[str, Any]], str]]]
RETRY = 5.0  # seconds before a failed restoration is tried again


async def create(kube: Kube, d: owned.Declared) -> bool:
    """Create a declared object; False if one of its name exists."""
    if d.kind == "Service":
        return await kube.create_service(d.manifest)
    if d.kind == "ConfigMap":
        return await kube.create_configmap(d.manifest)
    return await kube.create_object(*d.api, d.manifest)


async def restore(kube: Kube, job: JobSpec, d: owned.Declared) -> bool:
    """Create a missing object again; True if it was. One of its name that exists is the job's
    (else NameConflict): unseen by the watch because the watch lags (nothing to do) or its
    labels were taken off (put back, so that the watch sees it again)."""
    if await create(kube, d):
        return True
    api = None if d.api[0] == "" else d.api
    meta = await controlled(kube, job, d.kind, d.name, api)
    labels = d.fields["metadata"]["labels"]
    if meta is not None and any((meta.get("labels") or {}).get(k) != v for k, v in labels.items()):
        return await kube.patch_object(d.api, job.namespace, d.name, str(meta["uid"]), d.fields)
    return False


async def keep(
    kube: Kube,
    source: Source,
    job: JobSpec,
    plan: Plan,
    attempt: int,
    policy: bool,
    now: datetime,
    generation: int,
) -> None:
    """Keep the job's owned objects as declared, if it runs (``owned.applies``); what was done
    goes on ``plan`` (its conditions and Events)."""
    if not owned.applies(plan.status.get("phase"), job.suspend, plan.own):
        return
    first = builders.build_worker_pod(job, 0, attempt, plan.in_place) if job.gang else {}
    want = owned.declared(job, attempt, policy, first, plan.own)
    seen, unseen = await source((job.namespace, job.name), [(d.api, d.kind) for d in want])
    outcome = owned.Outcome([], [], [], unseen)
    if not unseen:
        review = owned.review(want, seen, job.uid)
        for d in review.missing:
            try:
                if await restore(kube, job, d):
                    outcome.restored.append(d)
            except NameConflict:
                raise  # the job is blocked by it, as when it creates its objects
            except Exception as exc:
                outcome.failed.append((d, api_message(exc)))
        for d, patch in review.changed:
            uid = str(seen[d.key]["metadata"].get("uid"))
            try:
                if await kube.patch_object(d.api, job.namespace, d.name, uid, patch):
                    outcome.reverted.append(d)
            except Exception as exc:
                outcome.failed.append((d, api_message(exc)))
    if outcome.failed:
        plan.recheck_in(RETRY)
    conds = Conditions(plan.status.get("conditions") or [], now, generation)
    owned.tell(conds, outcome, policy, format_time(now))
    if conds.items != (plan.status.get("conditions") or []):
        plan.status["conditions"] = conds.items
    plan.events.extend(conds.events)
