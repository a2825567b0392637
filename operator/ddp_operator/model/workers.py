"""What the operator keeps of each worker pod it watches: a small, pure summary."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import constants as c
from . import pod_status as ps


@dataclass(frozen=True)
class WorkerPod:
    """The observed state of one worker pod."""

    name: str
    index: int
    attempt: int
    phase: str = "Pending"
    uid: str | None = None
    deleting: bool = False
    node: str | None = None
    ips: tuple[str, ...] = ()  # its addresses (status.podIPs): where its reports come from
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    unschedulable: str | None = None
    owner_uid: str | None = None
    owner: str | None = None
    finalizers: tuple[str, ...] = ()
    deletion_time: str | None = None  # the end of its grace period, not the request
    deletion_grace: int | None = None  # its grace period's seconds
    node_lost: str | None = None
    not_starting: ps.Waiting | None = None  # a container's (or, from Events, the pod's) holdup
    scheduled: str | None = None  # when the pod was bound to its node (PodScheduled)
    container_ran: bool = False  # some (init) container has run or runs: past sandbox and mounts
    gated: bool = False  # held by Kueue's admission scheduling gate
    queue_managed: bool = False  # Kueue's webhook took the pod
    stopped: str | None = None  # why Kueue stopped (evicted) the pod
    unretriable: bool = False  # marked so that Kueue ends the group
    # In-place pods (``inplace_pod``): the attempt the operator told the pod (its annotation;
    # None: the pod's own ``attempt``), when, and its trainer's restart count then; how often its
    # trainer and its watch were (re)started since the pod was created, and whether its trainer
    # failed in the attempt (``exit_code``). Until the pod itself ends, ``phase`` is what its
    # trainer's end of this attempt makes it.
    in_place: bool = False
    told: int | None = None
    told_at: str | None = None
    nudged_at: str | None = None
    restart_pending: bool = False  # told, its trainer not restarted since (``_in_place``)
    trainer_container: str | None = None  # its trainer's container's ID now (what a tell records)
    restarted: int = 0
    reran: int = 0
    failed_in_place: bool = False
    watching: bool = False  # its watch runs: it can restart in place, whatever its trainer did
    started: bool = False  # its watch runs and its trainer was created: both read DDP_ATTEMPT
    finishing: bool = False  # told that the job has finished: its watch ends
    trainer_running: bool = False
    watch_backoff: str | None = None  # its watch waits out the kubelet's crash-loop back-off
    watch_broken: str | None = None  # why its watch cannot run (no /bin/sh or sleep in the image)
    quiet_since: str | None = None  # its watch has found its trainer's processes quiet since
    env_configmap: str | None = None  # the ConfigMap its trainer reads VC_WORKER_HOSTS from
    env_from: tuple[str, ...] = ()  # the ConfigMaps its trainer takes all of (``envFrom``)
    # How it ended, beyond exit code, reason and message (``failure_facts``): the ending
    # container (``previous_run``: its run that ended is its previous one, restarted since),
    # when it ended, the pod's other True conditions (type, reason), its disruption.
    container: str | None = None
    previous_run: bool = False
    finished_at: str | None = None
    conditions: tuple[tuple[str, str], ...] = ()
    disruption: ps.Disruption | None = None

    @property
    def attempt_now(self) -> int:
        """The attempt the pod runs or is to run: the one given (in place), else its own."""
        return self.attempt if self.told is None else self.told


def controller(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The controller ownerReference of an object: (UID, "Kind/name (uid ...)"), or Nones."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            uid = ref.get("uid")
            return uid, f"{ref.get('kind')}/{ref.get('name')} (uid {uid})"
    return None, None


def created_in(labels: Mapping[str, str]) -> int:
    """The attempt a pod was created in: its label, or the one builds up to 0.2.0 wrote (the
    key the in-place annotation keeps); 0 without either. Not a number: ValueError."""
    return int(labels.get(c.LABEL_ATTEMPT) or labels.get(c.LEGACY_LABEL_ATTEMPT) or "0")


def _env_configmap(container: Mapping[str, Any] | None) -> str | None:
    """The ConfigMap a trainer takes ``VC_WORKER_HOSTS`` from (the job's: ``job_configmap``),
    one string shared by the pods that name it."""
    for entry in (container or {}).get("env") or ():
        if entry.get("name") == c.ENV_HOSTS:
            ref = (entry.get("valueFrom") or {}).get("configMapKeyRef") or {}
            return sys.intern(ref["name"]) if ref.get("name") else None
    return None


def _env_from(container: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The ConfigMaps a trainer takes all of (``envFrom``), each name a string shared by the
    pods that name it."""
    refs = (
        (e.get("configMapRef") or {}).get("name") for e in (container or {}).get("envFrom") or ()
    )
    return tuple(sys.intern(r) for r in refs if r)


def _quiet_since(status: Mapping[str, Any], watch: Mapping[str, Any]) -> str | None:
    """Since when the watch has said its trainer's processes are quiet (``inplace_pod``): its
    readiness failed, on the pod's ContainersReady condition, after the watch started (a
    probe that never passed, or a container not yet probed, says nothing)."""
    started = ((watch.get("state") or {}).get("running") or {}).get("startedAt")
    if watch.get("ready") is not False or not started:
        return None
    for cond in status.get("conditions") or ():
        if cond.get("type") == "ContainersReady" and cond.get("status") == "False":
            since = cond.get("lastTransitionTime")
            return since if since and since > started else None
    return None


def _in_place(
    meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any], trainer: Any
) -> dict[str, Any]:
    """The in-place fields of a pod (``WorkerPod``), with the trainer's end if it ended in the
    attempt the pod was given while its watch still runs (what the pod's phase will be once the
    operator lets it end)."""
    if c.WATCH_CONTAINER not in [ct.get("name") for ct in spec.get("containers") or ()]:
        return {}
    try:
        annotations = meta.get("annotations") or {}
        told = int(annotations[c.ATTEMPT_ANNOTATION])
        counted = annotations.get(c.TOLD_RESTARTS_ANNOTATION)
        told_restarts = None if counted is None else int(counted)
        attempt = created_in(meta.get("labels") or {})
    except (KeyError, ValueError):
        return {}
    statuses = status.get("containerStatuses")
    cs, watch = ps.status_of(statuses, trainer), ps.status_of(statuses, c.WATCH_CONTAINER)
    restarted = int(cs.get("restartCount") or 0)
    # Its trainer's restart count has not moved past the count when it was told (told by an
    # operator that wrote no count: it owes a restart per attempt told since its creation).
    if told_restarts is not None:
        pending = restarted <= told_restarts
    else:
        pending = restarted < told - attempt
    trainer_state = cs.get("state") or {}
    ended = trainer_state.get("terminated")
    # Or the status is still of the container it ran when told, whatever the count says (the
    # kubelet moves the count as it removes the containers): that run's end is no end of the
    # attempt told, and its restart is still to come.
    container = cs.get("containerID") or (ended or {}).get("containerID")
    told_container = annotations.get(c.TOLD_CONTAINER_ANNOTATION)
    pending = pending or bool(told_container and container == told_container)
    watching = status.get("phase") == "Running" and "running" in (watch.get("state") or {})
    found: dict[str, Any] = {
        "in_place": True,
        "told": told,
        "told_at": annotations.get(c.TOLD_AT_ANNOTATION),
        "nudged_at": annotations.get(c.NUDGED_AT_ANNOTATION),
        "restart_pending": pending,
        "trainer_container": container,
        "restarted": restarted,
        "reran": int(watch.get("restartCount") or 0),
        "watching": watching,
        "started": watching and bool(trainer_state) and "waiting" not in trainer_state,
        "trainer_running": "running" in trainer_state,
        "finishing": c.FINISHED_ANNOTATION in (meta.get("annotations") or {}),
        "watch_broken": ps.cannot_start(watch, c.WATCH_LACKS_EXIT_CODE),
        "watch_backoff": ps.backing_off(watch),
        "quiet_since": _quiet_since(status, watch) if "running" in trainer_state else None,
    }
    # This attempt's trainer ended while the watch runs (or ends, told that the job finished):
    # the pod is to end. More restarts than tells are the kubelet's (a watch that started
    # before its pod was told, or killed: ``inplace_pod``): the last run counts.
    live = status.get("phase") not in ("Succeeded", "Failed")
    if live and ended and not pending and (watching or found["finishing"]):
        code = int(ended.get("exitCode") or 0)
        found.update(
            phase="Failed" if code else "Succeeded",
            failed_in_place=bool(code),
            exit_code=code,
            reason=ended.get("reason"),
            message=ended.get("message"),
            container=trainer,
            finished_at=ended.get("finishedAt"),
        )
    return found


def _ips(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The pod's addresses: every one of a dual-stack pod's."""
    found = tuple(a["ip"] for a in status.get("podIPs") or () if a.get("ip"))
    return found or ((status["podIP"],) if status.get("podIP") else ())


def observe(pod: Mapping[str, Any]) -> WorkerPod | None:
    """Summarise a worker pod; None for a pod without the operator's labels."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        index = int(labels[c.LABEL_INDEX])
        attempt = created_in(labels)
    except (KeyError, ValueError):
        return None
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = spec.get("containers") or []
    names = [ct.get("name") for ct in containers]
    trainer = c.TRAINER_CONTAINER if c.TRAINER_CONTAINER in names else (names or [None])[0]
    trainer_spec = next((x for x in containers if x.get("name") == trainer), None)

    phase = status.get("phase") or "Pending"
    exit_code = reason = message = ended = finished_at = None
    previous_run = False
    if phase in ("Failed", "Succeeded"):
        terms = ps.terminations(list(status.get("containerStatuses") or []))
        ended, term = trainer, terms.get(trainer or "")
        if phase == "Failed" and (term is None or not term.get("exitCode")):
            # The pod failed though the trainer did not: report the container that did.
            ended, term = next(
                ((n, t) for n, t in terms.items() if t.get("exitCode")), (ended, term)
            )
        if term is not None:
            exit_code = int(term.get("exitCode", 0))
            reason = term.get("reason")
            message = term.get("message")
            finished_at = term.get("finishedAt")
            previous_run = ps.ran_again(status.get("containerStatuses"), ended)
        if status.get("reason"):  # Evicted, NodeLost, DeadlineExceeded...
            reason = status.get("reason")
            message = status.get("message") or message

    unschedulable = scheduled = None
    for cond in status.get("conditions") or []:
        if cond.get("type") != "PodScheduled":
            continue
        if cond.get("status") == "True":
            scheduled = cond.get("lastTransitionTime")
        elif cond.get("reason") == "Unschedulable":
            unschedulable = cond.get("message") or "unschedulable"

    owner_uid, owner = controller(meta)
    ends = {"phase": phase, "exit_code": exit_code, "reason": reason, "message": message}
    ends.update(container=ended, finished_at=finished_at, previous_run=previous_run)
    disruption = ps.disruption(status)
    ends.update(_in_place(meta, spec, status, trainer))
    return WorkerPod(
        name=meta.get("name", ""),
        index=index,
        attempt=attempt,
        uid=meta.get("uid"),
        deleting=bool(meta.get("deletionTimestamp")),
        node=spec.get("nodeName"),
        ips=_ips(status),
        unschedulable=unschedulable,
        owner_uid=owner_uid,
        owner=owner,
        finalizers=tuple(meta.get("finalizers") or ()),
        deletion_time=meta.get("deletionTimestamp"),
        deletion_grace=meta.get("deletionGracePeriodSeconds"),
        node_lost=ps.node_lost(status, disruption),
        conditions=ps.conditions(status),
        disruption=disruption,
        not_starting=ps.not_starting(status),
        scheduled=scheduled,
        container_ran=ps.container_ran(status),
        gated=any(g.get("name") == c.KUEUE_GATE for g in spec.get("schedulingGates") or ()),
        queue_managed=labels.get(c.KUEUE_MANAGED_LABEL) == "true",
        stopped=ps.stopped(status),
        unretriable=(meta.get("annotations") or {}).get(c.KUEUE_RETRIABLE_ANNOTATION) == "false",
        env_configmap=_env_configmap(trainer_spec),
        env_from=_env_from(trainer_spec),
        **ends,
    )
