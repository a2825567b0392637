"""What a scenario costs the machine, from /proc: CPU seconds of the contender's controller and of
each process of the local control plane (API server, etcd, controller manager, scheduler, kwok),
and a process's resident memory. On a cluster not run on this machine, only the controller's."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from cluster import ROOT

TICK = os.sysconf("SC_CLK_TCK")
# The local cluster's processes (hack/cluster/cluster.sh runs them under .cluster/kwok), by the
# name the report gives them.
CONTROL_PLANE = {
    "kube-apiserver": "apiserver",
    "etcd": "etcd",
    "kube-controller-manager": "controller-manager",
    "kube-scheduler": "scheduler",
    "kwok-controller": "kwok",
}
# What the "cluster CPU" of a contender sums: its controller and the control plane it makes
# work. kwok stands in for the kubelets (the same pods for every contender) and is shown apart.
CLUSTER_ROLES = ("controller", "apiserver", "etcd", "controller-manager", "scheduler")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def steal_seconds() -> float:
    """CPU seconds the hypervisor took from this machine so far (all CPUs, /proc/stat): a run
    with much of it was slowed by other guests, not by what it measured."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / TICK


def memory_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) memory of a process, in MB."""
    kb = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            kb[key] = int(value.split()[0])
    return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024


def reset_peak(pid: int) -> None:
    """Start a process's peak RSS (VmHWM) over from its present RSS (proc(5), clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def control_plane(root: Path = ROOT) -> dict[str, int]:
    """The local cluster's processes of this checkout: role -> pid (empty for another cluster)."""
    found: dict[str, int] = {}
    prefix = str(root / ".cluster" / "kwok") + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except OSError:  # gone meanwhile
            continue
        role = CONTROL_PLANE.get(Path(exe).name)
        if role and exe.startswith(prefix):
            found[role] = int(entry.name)
    return found


class Meter:
    """CPU seconds per role between start() and stop(): the controller's pids (summed) and the
    control plane's."""

    def __init__(self, controller: Iterable[int] = ()) -> None:
        self.pids: dict[str, list[int]] = {"controller": list(controller)}
        for role, pid in control_plane().items():
            self.pids[role] = [pid]
        self._start: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        now = {role: sum(cpu_seconds(p) for p in pids) for role, pids in self.pids.items()}
        now["steal"] = steal_seconds()  # not processes: never in cluster_cpu()
        now["wall"] = time.monotonic()
        return now

    def start(self) -> Meter:
        self._start = self._now()
        return self

    def stop(self) -> dict[str, float]:
        """CPU seconds per role since start(), the machine's stolen CPU seconds ("steal") and the
        seconds metered ("wall")."""
        end = self._now()
        return {role: round(end[role] - self._start[role], 2) for role in end}


def cluster_cpu(usage: dict[str, float]) -> float | None:
    """The controller's and the control plane's CPU seconds, summed (None off this machine)."""
    if "apiserver" not in usage:
        return None
    return sum(usage.get(role, 0.0) for role in CLUSTER_ROLES)
