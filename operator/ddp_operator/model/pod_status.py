"""Readers of a pod's status: what its containers and conditions say (why one cannot start,
how one ended, whether the control plane is taking the pod away). Pure; ``workers`` keeps what
they find of each worker pod."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import constants as c

# Waiting reasons of a container on its normal way to start (or to restart in place); any other
# one means it cannot (ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...): the
# kubelet retries it.
STARTING = ("ContainerCreating", "PodInitializing", "RestartingAllContainers")

# Pod conditions every pod has: not kept (``WorkerPod.conditions`` holds the others).
ROUTINE_CONDITIONS = frozenset(
    ("PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers")
)


@dataclass(frozen=True)
class Waiting:
    """A container that cannot start: the kubelet's waiting reason and message."""

    container: str
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Disruption:
    """The pod's ``DisruptionTarget`` condition: the control plane is taking it away (an
    eviction, a preemption, a lost node, the pod garbage collector, the kubelet)."""

    reason: str
    message: str = ""
    time: str | None = None


def terminations(statuses: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each container's (name: state) last termination, if it has one."""
    found = {}
    for status in statuses:
        state = status.get("state") or {}
        term = state.get("terminated") or (status.get("lastState") or {}).get("terminated")
        if term:
            found[status.get("name", "")] = term
    return found


def node_lost(status: Mapping[str, Any], disruption: Disruption | None) -> str | None:
    """Why the pod's node counts as lost, if the control plane says so on the pod."""
    if status.get("reason") == "NodeLost":
        return status.get("message") or "its node was lost"
    if disruption is not None and disruption.reason == "DeletionByTaintManager":
        return disruption.message or "evicted from an unreachable node"
    return None


def conditions(status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The pod's True conditions other than the routine ones, as (type, reason)."""
    return tuple(
        (sys.intern(str(cond.get("type"))), sys.intern(str(cond.get("reason") or "")))
        for cond in status.get("conditions") or ()
        if cond.get("status") == "True" and cond.get("type") not in ROUTINE_CONDITIONS
    )


def disruption(status: Mapping[str, Any]) -> Disruption | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == c.DISRUPTION_TARGET and cond.get("status") == "True":
            return Disruption(
                str(cond.get("reason") or c.DISRUPTION_TARGET),
                str(cond.get("message") or ""),
                cond.get("lastTransitionTime"),
            )
    return None


def not_starting(status: Mapping[str, Any]) -> Waiting | None:
    """The first container (init containers first, the operator's watch last) waiting for a
    reason other than STARTING."""
    mains = sorted(status.get("containerStatuses") or (), key=lambda cs: is_watch(cs))
    for cs in [*(status.get("initContainerStatuses") or ()), *mains]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason and reason not in STARTING:
            return Waiting(cs.get("name", ""), reason, waiting.get("message") or "")
    return None


def is_watch(cs: Mapping[str, Any]) -> bool:
    return cs.get("name") == c.WATCH_CONTAINER


def container_ran(status: Mapping[str, Any]) -> bool:
    """Whether any container of the pod (init containers too) runs or has run."""
    for cs in [
        *(status.get("initContainerStatuses") or ()),
        *(status.get("containerStatuses") or ()),
    ]:
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        ran = (state.get("running"), state.get("terminated"), last.get("terminated"))
        if any(s is not None for s in ran):
            return True
    return False


def stopped(status: Mapping[str, Any]) -> str | None:
    """Kueue's reason and message when it stopped the pod (evicted or preempted its group)."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == c.KUEUE_STOPPED_CONDITION and cond.get("status") == "True":
            return ": ".join(filter(None, (cond.get("reason"), cond.get("message")))) or "stopped"
    return None


def status_of(statuses: Any, name: str | None) -> Mapping[str, Any]:
    return next((s for s in statuses or () if s.get("name") == name), {})


def ran_again(statuses: Any, name: str | None) -> bool:
    """Whether the container's last termination is its previous run's (``lastState``): it has
    started again since, and the log of the run that ended is its ``previous`` one."""
    status = status_of(statuses, name)
    return not (status.get("state") or {}).get("terminated") and bool(
        (status.get("lastState") or {}).get("terminated")
    )


def cannot_start(cs: Mapping[str, Any], lacks_exit_code: int | None = None) -> str | None:
    """Why a container cannot be started at all (its command cannot be run: the runtime's
    StartError, then RunContainerError while it backs off; or, given ``lacks_exit_code``, it
    exited with that code, saying what it lacks), if so."""
    state = cs.get("state") or {}
    waiting = state.get("waiting") or {}
    if waiting.get("reason") == "RunContainerError":
        return str(waiting.get("message") or waiting["reason"])
    for term in (state.get("terminated"), (cs.get("lastState") or {}).get("terminated")):
        if term and term.get("reason") == "StartError":
            return str(term.get("message") or term["reason"])
        if term and lacks_exit_code is not None and term.get("exitCode") == lacks_exit_code:
            return str(term.get("message") or f"exit code {lacks_exit_code}").strip()
    return None


def backing_off(cs: Mapping[str, Any]) -> str | None:
    """The kubelet's words while a container waits out its crash-loop back-off, if it does (an
    in-place restart never puts a pod's containers there; a container killed alone does)."""
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") == "CrashLoopBackOff":
        return str(waiting.get("message") or waiting["reason"])
    return None
