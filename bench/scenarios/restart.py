"""S6: a running job of N workers in which one worker fails (exit 137, as when killed): the time
from the failure (its pod seen Failed) to every worker of the next attempt Running, as each
contender restarts (ours and JobSet: the whole group; Kubeflow v1: the failed pod)."""

from __future__ import annotations

import time

from contenders.base import Contender
from cost import Meter
from podwatch import PodWatch
from scenarios.completion import finish
from scenarios.startup import SETTLE, Run


def restart(ct: Contender, nodes: int) -> Run:
    """One failure in a job of ``nodes`` workers, and its recovery."""
    ns = ct.namespace("s6")
    pods = PodWatch(ct.cluster, ns, ct.dead)
    try:
        ct.create(ns, ["r0"], nodes)
        pods.wait_running(nodes, f"S6 {ct.title}: 1 job x {nodes} -> Running")
        time.sleep(1)
        old = set(pods.running)
        victim = max(old, key=lambda u: pods.names[u])  # a worker, never worker-0 or the master
        meter = Meter(ct.pids()).start()
        finish(ct.cluster, ct.pool, ns, [pods.names[victim]], 137)
        recovered: list[float] = []

        def back() -> bool:
            t = ct.restarted(pods, old, nodes)
            if t is not None and victim in pods.failed:
                recovered.append(t)
            return bool(recovered)

        pods.wait(back, f"S6 {ct.title}: {nodes} workers of the next attempt -> Running")
        seconds = recovered[0] - pods.failed[victim]
        time.sleep(SETTLE)
        run = Run(seconds, nodes, meter.stop())
    finally:
        pods.close()
    ct.drop(ns)
    return run
