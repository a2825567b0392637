"""S1, S2 and S5: jobs applied together -> every pod Running, and what that cost in CPU."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from contenders.base import Contender
from cost import Meter
from podwatch import PodWatch

SETTLE = 2.0  # seconds after the last pod Running still metered: controllers' status writes


@dataclass
class Run:
    """One measured run: its time, the pods it made and the CPU seconds per role."""

    seconds: float
    pods: int
    cpu: dict[str, float] = field(default_factory=dict)


def startup(ct: Contender, jobs: int, nodes: int, tag: str) -> Run:
    """Seconds from the first create call to every pod Running, in a fresh namespace."""
    ns = ct.namespace(tag)
    pods = PodWatch(ct.cluster, ns, ct.dead)
    try:
        meter = Meter(ct.pids()).start()
        t0 = time.monotonic()
        ct.create(ns, [f"j{k}-{uuid.uuid4().hex[:4]}" for k in range(jobs)], nodes)
        doing = f"{tag} {ct.title}: {jobs} job(s) x {nodes} workers -> Running"
        seconds = pods.wait_running(jobs * nodes, doing) - t0
        time.sleep(SETTLE)
        run = Run(seconds, jobs * nodes, meter.stop())
    finally:
        pods.close()
    ct.drop(ns)
    return run
