"""Which failure is blamed on its node. Pure: the deciding failure of an attempt
(``failure_facts``, once ``failure_policy`` gave its verdict), the group's pods, the job's last
status and the nodes marked broken in; a ``Blame`` (node, reason, evidence) or None out.

A failure is blamed on its node when, in this order:

1. its deciding rank's output carries a hardware signature (``signatures``), or a
   failure-policy rule with ``blameNode: true`` matched it: ``HardwareError``;
2. its node is marked broken (a condition, taint or label the operator is given:
   ``model/node_health``): ``NodeMarkedBroken``;
3. the same worker's node hosted the deciding failure of ``failurePolicy.blameNodeAfter``
   attempts in a row (default 2), each a crash by a signal or an error torch raises for a device
   or a collective (``countable``): ``RepeatedFailure``; for a hang, the rank that hung sat on
   that node each time: ``RepeatedHang``.

A script's own failure blames nothing: a Python exception of its code (``ValueError``,
``torch.OutOfMemoryError``: anything but the errors torch raises for its devices and
collectives), an ``OOMKilled`` container; nor does a disruption (an eviction, a lost node), a
pod deleted, or a restart stuck in place (the operator's, or the cluster's, not the node's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import signatures
from .failure_facts import STALLED, WorkerFailure

HARDWARE = "HardwareError"
MARKED = "NodeMarkedBroken"
REPEATED = "RepeatedFailure"
REPEATED_HANG = "RepeatedHang"
REASONS = (HARDWARE, MARKED, REPEATED, REPEATED_HANG)

# Exceptions torch raises for what goes wrong under the script: a device, a collective, its
# launcher. Any other exception is the script's own.
_NOT_THE_SCRIPTS = re.compile(
    r"^\s*(?:[\w.]*\.)?(?:RuntimeError|DistBackendError|DistNetworkError|DistError|"
    r"AcceleratorError|ChildFailedError|SignalException)\b"
)
# What counts against a node when it repeats there: torch's own errors of a device or a
# collective, and a RuntimeError that says CUDA, NCCL or the NPU failed (older torch raises those
# so). A bare RuntimeError is often the script's own, and out-of-memory or a device-side assert
# come from its data or its sizes: none of those count.
_DEVICE_ERROR = re.compile(
    r"^\s*(?:[\w.]*\.)?(?:DistBackendError|DistNetworkError|AcceleratorError)\b"
    r"|^\s*(?:[\w.]*\.)?RuntimeError\b.*\b(?:CUDA error|NCCL|HCCL|NPU|cuDNN error|CUBLAS_STATUS)",
    re.IGNORECASE,
)
_SCRIPT_CAUSED = re.compile(r"out of memory|device-side assert", re.IGNORECASE)
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b")
_NOT_BLAMED = frozenset(("OOMKilled", "Deleted", "RestartStuck", "NodeLost"))
_CRASHES = frozenset(("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE", "SIGTRAP"))


@dataclass(frozen=True)
class Blame:
    """A node blamed: its name, why (``REASONS``) and the evidence, in one line."""

    node: str
    reason: str
    evidence: str


def scripts_own(failure: WorkerFailure) -> bool:
    """Whether the failure is the script's own: an exception of its code, or an out-of-memory
    kill of its container."""
    if failure.reason == "OOMKilled":
        return True
    summary = failure.words.summary
    return bool(_EXCEPTION.match(summary)) and not _NOT_THE_SCRIPTS.match(summary)


def node_of(failure: WorkerFailure, current: Mapping[int, WorkerPod]) -> str | None:
    """The node the failure happened on: its pod's, or (a hang) the pod of the rank that hung."""
    if failure.node:
        return failure.node
    pod = current.get(failure.index)
    return pod.node if pod is not None and pod.name == failure.pod else None


def streak(
    failure: WorkerFailure, node: str | None, status: Mapping[str, Any], attempt: int
) -> int:
    """How many deciding failures in a row, this one included, the same worker had on ``node``
    (the last one is ``status.firstFailure``, of this attempt or the one before): 0 for a
    failure that cannot count (no node, no worker, the script's own)."""
    if node is None or failure.index < 0 or not countable(failure):
        return 0
    last = status.get("firstFailure") or {}
    same = (
        last.get("worker") == failure.index
        and last.get("node") == node
        and int(last.get("attempt", -2)) >= attempt - 1
        and (last.get("reason") == STALLED) == (failure.reason == STALLED)
    )
    return int(last.get("nodeStreak") or 0) + 1 if same else 1


def countable(failure: WorkerFailure) -> bool:
    """Whether the failure counts against its node when it repeats there: a hang, a crash by a
    signal of the process's own (SIGSEGV, SIGBUS, SIGABRT, ...), or an error of a device or a
    collective (``DistBackendError``, ``AcceleratorError``, a ``RuntimeError`` that says CUDA or
    NCCL failed). A plain exit with no such error is the script's own choice, like its
    exceptions, a bare ``RuntimeError``, out-of-memory and a device-side assert."""
    if failure.reason in _NOT_BLAMED or failure.disruption or scripts_own(failure):
        return False
    if failure.reason == STALLED:
        return True
    summary = failure.words.summary
    device = bool(_DEVICE_ERROR.match(summary)) and not _SCRIPT_CAUSED.search(summary)
    return failure.signal in _CRASHES or device


def of(
    job: JobSpec,
    failure: WorkerFailure,
    rule: str,
    current: Mapping[int, WorkerPod],
    broken: Mapping[str, str],
    in_a_row: int,
) -> Blame | None:
    """The blame for the deciding ``failure`` (matched by ``rule``, or the default), None if
    its node is not to blame. ``broken``: the nodes marked broken (name: why); ``in_a_row``:
    its ``streak``."""
    node = node_of(failure, current)
    if node is None or failure.index < 0 or failure.disruption:
        return None
    if failure.reason in _NOT_BLAMED:
        return None
    # Every rank of a pod runs on its node: any line of its output may say the node broke.
    said = f"{failure.words.block}\n{failure.message}" if failure.exit_code is not None else ""
    found = signatures.find(said) if said.strip() else None
    if found is not None:
        return Blame(node, HARDWARE, f"{failure.pod}: {found.means}: {found.line}")
    by_rule = next((r for r in job.failure_policy.rules if r.name == rule), None)
    if by_rule is not None and by_rule.blame_node:
        said = failure.words.summary or failure.reason
        return Blame(node, HARDWARE, f"{failure.pod}: failurePolicy rule {rule}: {said}"[:300])
    if scripts_own(failure):
        return None
    if node in broken:
        return Blame(node, MARKED, f"node {node}: {broken[node]}"[:300])
    most = job.failure_policy.blame_node_after
    if most and in_a_row >= most and countable(failure):
        if failure.reason == STALLED:
            return Blame(
                node,
                REPEATED_HANG,
                f"worker {failure.index} hung on node {node} {in_a_row} attempts in a row",
            )
        what = failure.words.summary or failure.reason
        return Blame(
            node,
            REPEATED,
            f"worker {failure.index} failed on node {node} {in_a_row} attempts in a row: {what}"[
                :300
            ],
        )
    return None
