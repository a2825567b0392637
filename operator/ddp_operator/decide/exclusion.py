"""The nodes a job keeps out: ``status.excludedNodes`` (node, reason, evidence, attempt, time),
bounded by ``failurePolicy.maxExcludedNodes``, and the nodes its new pods avoid (those listed,
and those marked broken now). Pure.

A node blamed (``blame``) is listed once; past the bound it is not, and the condition
``NodesExcluded`` says so (``ExclusionLimitReached``): the failure then goes the way it would
without blame. A worker that no node can take any longer (the scheduler says so while nodes are
kept out) leaves the job waiting, Pending, with the condition's reason ``NoNodeLeft``: a pod that
cannot be scheduled is no failure, so the job never loops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from .blame import Blame
from .conditions import NORMAL, WARNING, Conditions, Event

CONDITION = c.COND_NODES_EXCLUDED
EXCLUDED = "NodeExcluded"
LIMIT = "ExclusionLimitReached"
NO_NODE_LEFT = "NoNodeLeft"
MOST_AVOIDED = 128  # names in one pod's affinity: the listed first, then the marked (sorted)


@dataclass(frozen=True)
class NodeEvent:
    """An Event to post on a Node: which job blamed it, and why."""

    node: str
    reason: str
    message: str


def listed(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.excludedNodes``, as kept."""
    return [dict(e) for e in status.get("excludedNodes") or () if e.get("node")]


def names(status: Mapping[str, Any]) -> list[str]:
    return [e["node"] for e in listed(status)]


def exclude(
    job: JobSpec,
    conds: Conditions,
    new: dict[str, Any],
    blame: Blame,
    attempt: int,
    events: list[NodeEvent],
) -> bool:
    """List ``blame``'s node in the status being written (``new``), within the bound, and say
    so (a Warning Event on the job, one on the Node); whether the node is kept out (already, or
    now)."""
    entries = listed(new)
    if any(e["node"] == blame.node for e in entries):
        return True
    most = job.failure_policy.max_excluded_nodes
    if len(entries) >= most:
        why = (
            f"node {blame.node} is not kept out: {len(entries)} nodes are already, "
            f"failurePolicy.maxExcludedNodes is {most} ({blame.reason}: {blame.evidence})"
        )
        conds.set(CONDITION, bool(entries), LIMIT, why, WARNING)
        return False
    entry = {
        "node": blame.node,
        "reason": blame.reason,
        "evidence": blame.evidence,
        "attempt": attempt,
        "time": conds.now,
    }
    new["excludedNodes"] = [*entries, entry]
    message = (
        f"node {blame.node} kept out of the job ({blame.reason}: {blame.evidence}); "
        f"{len(entries) + 1} of at most {most} nodes excluded"
    )
    conds.set(CONDITION, True, EXCLUDED, message)
    conds.events.append(Event(WARNING, EXCLUDED, message))
    events.append(
        NodeEvent(
            blame.node,
            "DDPJobBlamedNode",
            f"DDPJob {job.namespace}/{job.name} keeps its workers off this node "
            f"(attempt {attempt}, {blame.reason}): {blame.evidence}"[:1000],
        )
    )
    return True


def avoid(status: Mapping[str, Any], broken: Iterable[str]) -> list[str]:
    """The nodes the job's new pods avoid: those it keeps out, then those marked broken now,
    ``MOST_AVOIDED`` at most."""
    kept = names(status)
    marked = sorted(set(broken) - set(kept))
    return (kept + marked)[:MOST_AVOIDED]


def report(conds: Conditions, live: Iterable[WorkerPod], status: Mapping[str, Any]) -> None:
    """``NoNodeLeft`` while a worker cannot be scheduled and nodes are kept out; back to
    ``NodeExcluded`` once every worker is placed."""
    kept = names(status)
    if not kept:
        return
    stuck = sorted((p for p in live if p.unschedulable and not p.node), key=lambda p: p.index)
    if stuck:
        first = stuck[0]
        message = (
            f"{len(stuck)} worker(s) wait for a node: {first.name} cannot be scheduled with "
            f"{len(kept)} node(s) kept out ({', '.join(kept)}): {first.unschedulable}"
        )[:1000]
        conds.set(CONDITION, True, NO_NODE_LEFT, message, WARNING)
        return
    was = next((cd for cd in conds.items if cd.get("type") == CONDITION), None)
    if was is not None and was.get("reason") == NO_NODE_LEFT:
        message = f"{len(kept)} node(s) kept out ({', '.join(kept)}); every worker is placed"
        conds.set(CONDITION, True, EXCLUDED, message, NORMAL)
