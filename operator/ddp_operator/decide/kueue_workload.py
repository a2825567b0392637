"""Kueue's job-level Workload: the job admitted whole through one Workload (``Queue.workload``),
not as Kueue's pod group. It is how MultiKueue runs a DDPJob on another cluster: on the manager
cluster the operator only makes the job's Workload (``manifests/kueue_workload``); MultiKueue's
copy of the job on a worker cluster names the Workload it was admitted with there
(``kueue.x-k8s.io/prebuilt-workload-name``), and the operator there runs the job once that
Workload is Admitted. Pure: the Workload (and the ResourceFlavors it was given) in; what it
means for the job out.

* Not Admitted (or no Workload yet): the job is held as a suspended one is, with no pods; a group
  Kueue evicts goes without a failure or a counted restart. ``Queued`` says why, in Kueue's words.
* Admitted: the workers get the node labels and tolerations of the ResourceFlavors Kueue
  assigned, as Kueue's own job integrations do.
* Evicted (preempted, its cluster lost, ...): Kueue only marks the Workload; the job's controller
  stops the job, then gives the quota back (``release``), and Kueue queues the Workload again.
* The job over: the Workload is Finished (``finish``), which frees its quota; MultiKueue copies
  that (and the job's status) to the manager's copy.
* The prebuilt Workload becomes the job's (its controller ``ownerReference``, as Kueue does for
  its own jobs: ``adopt``), so that it goes with the job; one another object controls is never
  used (``NameConflict``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..manifests.builders import owner_reference
from ..manifests.kueue_workload import placed_by_kueue
from ..model import constants as c
from ..model.jobspec import JobSpec
from .conditions import NORMAL, WARNING, Conditions, format_time
from .failures import NameConflict

Manifest = dict[str, Any]
# How often a held job reads its Workload again: one not yet the job's wakes no pass (the
# operator watches the Workloads a DDPJob controls: ``handlers.workload_changed``).
RECHECK = 2.0
# How often an admitted job reads its Workload again, should the watch miss its eviction (kopf
# stops serving a resource while discovery does not list its CRD: seen in CI, an evicted job
# kept running for a minute and more).
ADMITTED_RECHECK = 30.0


@dataclass(frozen=True)
class Admission:
    """What a job-level Workload says: whether the job may run, and where."""

    workload: str
    admitted: bool
    reason: str  # Kueue's, from the condition that says why (or ours: WorkloadMissing)
    message: str
    evicted: bool = False  # Evicted True: the job is to stop, and give its quota back
    reserved: bool = False  # QuotaReserved True
    finished: bool = False
    flavors: tuple[str, ...] = ()  # the ResourceFlavors Kueue assigned
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    topology: bool = False  # Kueue places the pods (a topology assignment)
    version: str = ""  # the Workload's resourceVersion: its status patches are conditional
    conditions: tuple[Mapping[str, Any], ...] = ()
    generation: int = 0


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(x.get("type")): x for x in ((workload.get("status") or {}).get("conditions") or ())}


def read(name: str, workload: Mapping[str, Any] | None) -> Admission:
    """The admission Workload ``name`` (None: not there) gives the job."""
    if workload is None:
        return Admission(
            name, False, "WorkloadMissing", f"Kueue's Workload {name} does not exist (yet)"
        )
    conds = _conditions(workload)
    true = {t for t, x in conds.items() if x.get("status") == "True"}
    evicted = "Evicted" in true
    admitted = "Admitted" in true and not evicted and "Finished" not in true
    why = conds.get("Evicted") if evicted else conds.get(c.KUEUE_QUOTA_RESERVED)
    if admitted:
        why = conds.get("Admitted")
    elif "Admitted" not in true and c.KUEUE_QUOTA_RESERVED in true:
        why = conds.get("Admitted") or why  # quota reserved, its admission checks pending
    meta = workload.get("metadata") or {}
    assignments = ((workload.get("status") or {}).get("admission") or {}).get(
        "podSetAssignments"
    ) or ()
    flavors = sorted({str(f) for a in assignments for f in (a.get("flavors") or {}).values()})
    return Admission(
        workload=name,
        admitted=admitted,
        reason=str((why or {}).get("reason") or "Pending"),
        message=str((why or {}).get("message") or "Kueue has not admitted it yet"),
        evicted=evicted,
        reserved=c.KUEUE_QUOTA_RESERVED in true,
        finished="Finished" in true,
        flavors=tuple(flavors),
        topology=any(
            a.get("topologyAssignment") or a.get("delayedTopologyRequest") for a in assignments
        ),
        version=str(meta.get("resourceVersion") or ""),
        conditions=tuple((workload.get("status") or {}).get("conditions") or ()),
        generation=int(meta.get("generation") or 0),
    )


def placed(admission: Admission, flavors: Mapping[str, Mapping[str, Any] | None]) -> Admission:
    """``admission`` with the node labels and tolerations of its ResourceFlavors (``flavors``:
    each by name, None if it is gone)."""
    selector: dict[str, str] = {}
    tolerations: list[Mapping[str, Any]] = []
    for name in admission.flavors:
        spec = (flavors.get(name) or {}).get("spec") or {}
        selector.update(spec.get("nodeLabels") or {})
        tolerations += [t for t in spec.get("tolerations") or () if t not in tolerations]
    return dataclasses.replace(admission, node_selector=selector, tolerations=tuple(tolerations))


def as_admitted(job: JobSpec, admission: Admission | None) -> JobSpec:
    """The job as its Workload lets it run: held (suspended) until Admitted; then its pod
    template with the flavors' node labels and tolerations and, where Kueue assigned a
    topology, what its topology-aware scheduling places by (``placed_by_kueue``)."""
    if admission is None:
        return job
    if not admission.admitted:
        return dataclasses.replace(job, suspend=True)
    if not admission.node_selector and not admission.tolerations and not admission.topology:
        return job
    template = dict(job.template)
    spec = dict(template.get("spec") or {})
    if admission.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **admission.node_selector}
    own = list(spec.get("tolerations") or ())
    if admission.tolerations:
        spec["tolerations"] = own + [dict(t) for t in admission.tolerations if t not in own]
    template["spec"] = spec
    if admission.topology:
        template = placed_by_kueue(template, admission.workload)
    return dataclasses.replace(job, template=template)


def held(conds: Conditions, admission: Admission) -> tuple[str, str]:
    """Say why the job waits (``Queued``, ``Admitted``); returns the reason and message of its
    ``Suspended`` condition."""
    evicted = admission.evicted
    message = (
        f"Kueue's Workload {admission.workload} is not admitted: {admission.message} "
        f"({admission.reason})"
    )
    if evicted:
        message = (
            f"Kueue evicted the job's Workload {admission.workload}: {admission.message} "
            f"({admission.reason}); its workers are deleted, and it waits to be admitted again "
            "(no restart counted)"
        )
    reason = "Evicted" if evicted else "WaitingForAdmission"
    conds.set(c.COND_QUEUED, True, reason, message, WARNING if evicted else NORMAL)
    conds.set(c.COND_ADMITTED, False, reason, message)
    return reason, message


def report(conds: Conditions, admission: Admission | None) -> float | None:
    """``Admitted`` once the Workload is; seconds until the Workload is to be read again."""
    if admission is None or not admission.admitted:
        return None
    where = f" (flavors {', '.join(admission.flavors)})" if admission.flavors else ""
    message = f"Kueue admitted the job's Workload {admission.workload}{where}"
    conds.set(c.COND_QUEUED, False, "Admitted", message)
    conds.set(c.COND_ADMITTED, True, "Admitted", message, NORMAL)
    return ADMITTED_RECHECK


def _condition(
    admission: Admission, type_: str, status: bool, reason: str, message: str, now: datetime
) -> Manifest:
    old = next((x for x in admission.conditions if x.get("type") == type_), None)
    moved = old is None or old.get("status") != ("True" if status else "False")
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": format_time(now) if moved else old.get("lastTransitionTime"),
        "observedGeneration": admission.generation,
    }


def _patch(found: Admission, new: Sequence[Manifest], **status: Any) -> Manifest:
    """A merge patch of the Workload's status, conditional on the version read: a merge patch
    replaces the whole list of conditions, so it carries every other one unchanged."""
    kept = [x for x in found.conditions if x.get("type") not in {n["type"] for n in new}]
    return {
        "metadata": {"resourceVersion": found.version},
        "status": {**status, "conditions": [*kept, *new]},
    }


def release(admission: Admission | None, pods_left: int, now: datetime) -> Manifest | None:
    """Once an evicted job's pods are gone: give the quota back (as Kueue's own job integrations
    do), so that Kueue queues the Workload again; None if nothing is to be given back."""
    if admission is None or not admission.evicted or not admission.reserved or pods_left:
        return None
    evicted = next((x for x in admission.conditions if x.get("type") == "Evicted"), {})
    why = str(evicted.get("reason") or "Evicted")
    message = str(evicted.get("message") or "evicted")
    new = [
        _condition(admission, c.KUEUE_QUOTA_RESERVED, False, "Pending", message, now),
        _condition(
            admission, "Admitted", False, "NoReservation", "The workload has no reservation", now
        ),
        _condition(admission, "Requeued", why in ("Preempted", "NodeFailures"), why, message, now),
    ]
    return _patch(admission, new, admission=None)


def finish(
    admission: Admission | None, succeeded: bool, message: str, now: datetime
) -> Manifest | None:
    """Once the job is over: its Workload Finished (Kueue frees the quota); None if it is."""
    if admission is None or admission.finished or admission.version == "":
        return None
    reason = "Succeeded" if succeeded else "Failed"
    return _patch(admission, [_condition(admission, "Finished", True, reason, message, now)])


def adopt(job: JobSpec, workload: Mapping[str, Any]) -> Manifest | None:
    """A merge patch making the job the Workload's controller, if it is not yet; NameConflict if
    another object controls it."""
    meta = workload.get("metadata") or {}
    owners = list(meta.get("ownerReferences") or ())
    controller = next((o for o in owners if o.get("controller")), None)
    if controller is not None:
        if controller.get("uid") == job.uid:
            return None
        raise NameConflict(
            f"Kueue's Workload {meta.get('name')} named by {c.KUEUE_PREBUILT} is controlled by "
            f"{controller.get('kind')} {controller.get('name')}, not by this job"
        )
    mine = owner_reference(job)
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "ownerReferences": [*owners, mine],
        }
    }
