"""What a running job owns besides its pods (its Service, ConfigMaps, NetworkPolicy, gang
objects), as declared, against what the operator's watch of them shows: which are missing,
which were changed by hand, and how the job tells of it. Pure: the job loop acts
(``act/owned_steps``), the watch observes (``api/ownedwatch``).

Kept while the job has pods of its own not being deleted and has not finished: a deleted object
is created again, a changed one put back (its declared fields; what the API server or a
scheduler adds beside them is left alone), each with a Warning Event and the condition
``OwnedObjects``. While the NetworkPolicy is missing, ``Isolated`` is False: pods of other
namespaces may reach the workers until it is back. Only objects the job controls are looked at
(their controller's UID): one of the job's names that another controls is a NameConflict when
the job creates it, never changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..manifests import builders, gang, job_configmap, netpol, worker_env
from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .conditions import WARNING, Conditions, Event, condition

COND_OWNED = "OwnedObjects"
COND_ISOLATED = "Isolated"
SERVICE = ("", "v1", "services")
CONFIGMAP = ("", "v1", "configmaps")
EXACT = frozenset({"selector", "matchLabels"})  # maps whose extra keys change what they select

Api = tuple[str, str, str]  # group ("" for the core API), version, plural
Name = tuple[str, str]  # kind, name


@dataclass(frozen=True)
class Declared:
    """One object the job owns, as it declares it: its manifest, and the part kept as declared
    (``fields``: labels, and spec or data)."""

    api: Api
    manifest: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def key(self) -> Name:
        return self.kind, self.name

    def describe(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def fields(self) -> dict[str, Any]:
        """What is kept as declared: labels, and spec (a ConfigMap: its data; the job's
        ``DDP_ATTEMPT`` is the loop's to move, after the status that records it)."""
        labels = {"metadata": {"labels": dict(self.manifest["metadata"]["labels"])}}
        if self.kind == "ConfigMap":
            data = self.manifest.get("data") or {}
            return {**labels, "data": {k: v for k, v in data.items() if k != c.ENV_ATTEMPT}}
        return {**labels, "spec": self.manifest.get("spec") or {}}


def applies(phase: str | None, suspended: bool, own: Iterable[WorkerPod]) -> bool:
    """Whether a job's owned objects are kept now: it runs (pods of its own, not being deleted),
    and is neither finished nor suspended."""
    running = any(not p.deleting for p in own)
    return running and not suspended and bool(phase) and phase not in c.FINISHED_PHASES


def declared(
    job: JobSpec,
    attempt: int,
    policy: bool,
    first_pod: Mapping[str, Any],
    own: Iterable[WorkerPod] = (),
) -> list[Declared]:
    """The objects the job owns, its ConfigMap saying ``attempt`` (the one its status records:
    a ConfigMap created again never runs ahead of it); ``policy``: it is isolated;
    ``first_pod``: its worker 0, for a gang's resources; ``own``: its pods, whose reading of
    its ConfigMap of common values (``worker_env``; immutable, so never changed by hand)
    declares it (pods made by an operator before it read none, or another one)."""
    meta = builders.job_object_meta(job, job_configmap.name(job.name))
    env = job_configmap.build(meta, job.nodes, builders.worker_hosts(job), attempt)
    out = [Declared(SERVICE, builders.build_service(job)), Declared(CONFIGMAP, env)]
    if worker_env.read_by(job, own):
        meta = builders.job_object_meta(job, worker_env.name(job))
        out.append(Declared(CONFIGMAP, worker_env.build(meta, job)))
    if policy:
        out.append(Declared(netpol.API, netpol.build_network_policy(job)))
    for obj in gang.group_objects(job, first_pod):
        out.append(Declared((obj.group, obj.version, obj.plural), obj.manifest))
    return out


def covers(want: Any, seen: Any, key: str = "") -> bool:
    """Whether ``seen`` holds what ``want`` declares: every declared key (an exact map, a
    selector, no other), lists of the same length item by item, scalars equal."""
    if isinstance(want, Mapping):
        if not isinstance(seen, Mapping) or (key in EXACT and set(seen) - set(want)):
            return False
        return all(covers(v, seen.get(k), k) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(seen, list)
            and len(want) == len(seen)
            and all(covers(w, s) for w, s in zip(want, seen, strict=True))
        )
    return want == seen


def put_back(want: Mapping[str, Any], seen: Mapping[str, Any] | None, key: str = "") -> Any:
    """The merge patch that makes ``seen`` hold ``want`` again (an exact map's extra keys
    removed; lists replaced whole, as a merge patch does)."""
    patch: dict[str, Any] = {}
    if key in EXACT and isinstance(seen, Mapping):
        patch = {k: None for k in seen if k not in want}
    for k, v in want.items():
        inner = seen.get(k) if isinstance(seen, Mapping) else None
        patch[k] = put_back(v, inner, k) if isinstance(v, Mapping) else v
    return patch


@dataclass
class Review:
    """What the watch shows of the declared objects: missing, or changed (each with the patch
    that puts it back)."""

    missing: list[Declared]
    changed: list[tuple[Declared, dict[str, Any]]]


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


def review(want: Iterable[Declared], seen: Mapping[Name, Mapping[str, Any]], uid: str) -> Review:
    """Compare the declared objects with those the watch shows the job (``seen``, by kind and
    name); one another controls is not the job's and is left alone here."""
    out = Review([], [])
    for d in want:
        obj = seen.get(d.key)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            if obj is None:
                out.missing.append(d)
            continue
        if not controlled_by(obj, uid):
            continue
        if not covers(d.fields, obj):
            out.changed.append((d, put_back(d.fields, obj)))
    return out


@dataclass
class Outcome:
    """What the loop did about a review: each object's description, and what failed (why)."""

    restored: list[Declared]
    reverted: list[Declared]
    failed: list[tuple[Declared, str]]
    unseen: str = ""  # why the objects cannot be watched, if they cannot


def tell(conds: Conditions, outcome: Outcome, isolated: bool, at: str) -> None:
    """Put an outcome on the job: ``OwnedObjects`` (set once something happened) and, for an
    isolated job whose NetworkPolicy went, ``Isolated``; each change with a Warning Event."""
    if outcome.unseen:
        why = f"{outcome.unseen}; a deleted object comes back only when pods are next created"
        conds.set(COND_OWNED, False, "OwnedObjectsUnseen", why, WARNING)
        return
    failed = [f"{d.describe()}: {why}" for d, why in outcome.failed]
    if failed:
        message = f"cannot restore {'; '.join(failed)} (retried)"
        conds.set(COND_OWNED, False, "RestoreFailed", message, WARNING)
    elif outcome.restored or outcome.reverted:
        parts = []
        if outcome.restored:
            names = ", ".join(d.describe() for d in outcome.restored)
            parts.append(f"{names} missing (seen {at}): created again")
        if outcome.reverted:
            names = ", ".join(d.describe() for d in outcome.reverted)
            parts.append(f"{names} changed by hand (seen {at}): put back as the job declares")
        conds.set(COND_OWNED, True, "ObjectsRestored", "; ".join(parts))
        conds.events.append(Event(WARNING, "ObjectsRestored", "; ".join(parts)))
    elif _false(conds, COND_OWNED):  # it came back otherwise (by hand)
        message = f"every object of the job is as it declares (seen {at})"
        conds.set(COND_OWNED, True, "ObjectsAsDeclared", message, WARNING)
    if not isolated:
        return
    lost = [d for d, _ in outcome.failed if d.kind == netpol.KIND]
    back = [d for d in outcome.restored if d.kind == netpol.KIND]
    if lost:
        why = f"NetworkPolicy {lost[0].name} is missing (seen {at}): pods of other namespaces "
        conds.set(COND_ISOLATED, False, "NetworkPolicyMissing", why + "may reach the workers "
                  "until it is back", WARNING)  # fmt: skip
    elif back or _false(conds, COND_ISOLATED):
        why = f"the job's NetworkPolicy is back (seen {at}); while it was missing, pods of "
        why += "other namespaces could reach the workers"
        conds.set(COND_ISOLATED, True, "NetworkPolicyRestored", why, WARNING)


def _false(conds: Conditions, type_: str) -> bool:
    return (condition(conds.items, type_) or {}).get("status") == "False"
