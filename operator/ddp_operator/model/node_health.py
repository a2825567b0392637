"""What says a Node's accelerator is broken: the markers the operator is given
(``ddp-operator run --broken-node-marker``, the chart's ``badNodes.markers``), read on a Node
object. Pure.

A marker is one of:

* ``condition:<Type>=<Status>``: the node has condition ``Type`` with that status (NVSentinel's
  ``SysLogsXIDError=True``, node-problem-detector's ``KernelDeadlock=True``, EKS's
  ``AcceleratedHardwareReady=False``);
* ``taint:<key>``: the node carries a taint of that key (any value, any effect);
* ``label:<key>=<value>|<value>...``: the node's label ``key`` has one of the values
  (HyperPod's ``sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement``).

``DEFAULT_MARKERS`` are those of the tools that mark GPU nodes broken without taking them out of
scheduling themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CONDITION, TAINT, LABEL = "condition", "taint", "label"
# The taint the operator puts on a node a job blamed, where told to (``--taint-blamed-nodes``):
# NoSchedule, value "true", as NVSentinel's own taints are shaped.
SUSPECT_TAINT = "ddp-operator.io/suspect"

DEFAULT_MARKERS = (
    # NVSentinel's syslog health monitor (docs/syslog-health-monitor.md of NVIDIA/NVSentinel)
    "condition:SysLogsXIDError=True",
    "condition:SysLogsSXIDError=True",
    "condition:SysLogsGPUFallenOff=True",
    # NVSentinel's GPU health monitor (DCGM health watches, one condition each)
    "condition:GpuMemWatch=True",
    "condition:GpuNvlinkWatch=True",
    "condition:GpuPcieWatch=True",
    "condition:GpuInforomWatch=True",
    # node-problem-detector's kernel monitor
    "condition:KernelDeadlock=True",
    "condition:ReadonlyFilesystem=True",
    # EKS node monitoring agent: the accelerator is not ready
    "condition:AcceleratedHardwareReady=False",
    # SageMaker HyperPod's health label, the values that keep workloads off
    "label:sagemaker.amazonaws.com/node-health-status="
    "Unschedulable|UnschedulablePendingReplacement|UnschedulablePendingReboot",
)


@dataclass(frozen=True)
class Marker:
    """One marker: its kind (CONDITION, TAINT, LABEL), the key (condition type, taint or label
    key) and the values that say broken (a condition's status, a label's values; a taint:
    none, any)."""

    kind: str
    key: str
    values: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        said = f"={'|'.join(self.values)}" if self.values else ""
        return f"{self.kind}:{self.key}{said}"


class MarkerError(ValueError):
    """A marker that cannot be read (the operator refuses to start with it)."""


def parse(text: str) -> Marker:
    """A marker from its text (module docstring); MarkerError if it is none."""
    kind, _, rest = text.strip().partition(":")
    key, _, values = rest.partition("=")
    if kind not in (CONDITION, TAINT, LABEL) or not key:
        raise MarkerError(
            f"{text!r} is no node marker: condition:<Type>=<Status>, taint:<key> or "
            "label:<key>=<value>|<value>"
        )
    found = tuple(v for v in values.split("|") if v)
    if kind in (CONDITION, LABEL) and not found:
        raise MarkerError(f"{text!r}: a {kind} marker needs its value(s) after '='")
    return Marker(kind, key, found)


def parse_all(texts: Iterable[str]) -> tuple[Marker, ...]:
    """Markers from their texts; comma-separated lists are split."""
    return tuple(parse(t) for text in texts for t in text.split(",") if t.strip())


def broken(node: Mapping[str, Any], markers: Iterable[Marker]) -> str | None:
    """Why ``node`` (a Node object) is marked broken, in one line, or None."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    spec = node.get("spec") or {}
    for marker in markers:
        if marker.kind == CONDITION:
            for cond in status.get("conditions") or ():
                if cond.get("type") == marker.key and cond.get("status") in marker.values:
                    said = cond.get("message") or cond.get("reason") or ""
                    return f"condition {marker.key}={cond.get('status')}" + (
                        f": {said}"[:200] if said else ""
                    )
        elif marker.kind == TAINT:
            for taint in spec.get("taints") or ():
                if taint.get("key") == marker.key:
                    value = taint.get("value")
                    return f"taint {marker.key}" + (f"={value}" if value else "")
        else:
            value = (meta.get("labels") or {}).get(marker.key)
            if value in marker.values:
                return f"label {marker.key}={value}"
    return None
