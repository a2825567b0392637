"""``make chaos``: scripted jobs under randomly injected faults, on the local cluster.

    PYTHONPATH=tests python -m harness.chaos [--minutes 3] [--seed N] [--settle 180]

A fresh namespace gets its own operator, a ``Kubelet`` and a ``Ledger`` (harness.scenario). For
``--minutes``, waves of ``ScriptedJob``s of all three kinds are submitted (every 15 s, 2-4 jobs
of 2-4 workers) and, every 4-10 s, a fault is injected, the kinds taken in turn in a shuffled
order:

    operator  the operator SIGKILLed, a new one started 0-3 s later
    control   the control plane stopped for 5-20 s (harness.faults.control_plane_down)
    delete    a Running worker pod deleted
    silence   a node silenced for 20-80 s (Ready=Unknown after ~20 s; later, its pods are
              evicted once their toleration of the unreachable taint runs out), then revived
    hold      a Running worker pod held by the test finalizer and deleted, so it stays
              Terminating for 5-20 s, then released

Then every fault still in force is undone and the jobs get ``--settle`` seconds to finish. The
report is a Markdown table; the exit status is 1 if a must-be-0 row is not 0. An error of the
harness itself (Kubelet, Ledger, a fault that cannot be injected or undone) ends the run at
once with the reason (exit 2). "Pods lost": for a job that did not end as expected, the
workers of its current attempt (``status.restarts``) that the Ledger never saw as a pod, i.e.
that the operator never (re)created.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable

from kubernetes import client

from . import faults, nodes
from . import jobs as ddpjobs
from .cluster import CRD_FILE, Cluster, connect, disconnect
from .operator import OperatorProcess
from .podwatch import LABEL_JOB
from .report import report
from .scenario import KINDS, Kubelet, Ledger, ScriptedJob, run_until_done, verify
from .verify import FINISHED

FAULTS = ("operator", "control", "delete", "silence", "hold")


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Chaos:
    """One chaos run in namespace ``ns``."""

    def __init__(self, cluster: Cluster, seed: int, minutes: float):
        self.cluster, self.rng = cluster, random.Random(seed)
        self.seed, self.minutes = seed, minutes
        self.ns = f"ddp-chaos-{uuid.uuid4().hex[:6]}"
        self.jobs: list[ScriptedJob] = []
        self.injected: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.crashes = 0
        self.undo: list[tuple[float, str, Callable[[], None]]] = []
        self.silenced: str | None = None
        self.order: list[str] = []
        self.operator = OperatorProcess(cluster, self.ns)
        self.kubelet = Kubelet(cluster, self.ns, [], run_seconds=4)
        self.ledger = Ledger(cluster, self.ns)

    def start(self) -> None:
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        self.cluster.core.create_namespace(nodes.fake_nodes_namespace(self.ns))
        self.ledger.start()
        self.kubelet.start()
        self.operator.start().wait_ready()
        log(f"namespace {self.ns}; operator log {self.operator.log}")

    def check(self) -> None:
        """Fail at once on a harness error; restart an operator that exited by itself."""
        self.kubelet.check()
        self.ledger.check()
        proc = self.operator.proc
        if proc is not None and proc.poll() is not None:
            self.crashes += 1
            log(f"the operator exited by itself (status {proc.returncode}); starting another")
            self.operator.start().wait_ready()

    def wave(self, n: int) -> None:
        for i in range(self.rng.randint(2, 4)):
            kind = self.rng.choice(KINDS)
            job = ScriptedJob(f"w{n:02d}-{i}-{kind}", nodes=self.rng.randint(2, 4), kind=kind)
            self.kubelet.add(job)
            self.jobs.append(job)
            self.cluster.custom.create_namespaced_custom_object(
                ddpjobs.GROUP, ddpjobs.VERSION, self.ns, ddpjobs.PLURAL, job.manifest(self.ns)
            )
        log(f"wave {n}: {len(self.jobs)} jobs in all")

    def running_worker(self) -> str | None:
        pods = self.cluster.core.list_namespaced_pod(self.ns, label_selector=LABEL_JOB).items
        live = [
            p.metadata.name
            for p in pods
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]
        return self.rng.choice(live) if live else None

    def later(self, seconds: float, what: str, fn: Callable[[], None]) -> None:
        self.undo.append((time.monotonic() + seconds, what, fn))

    def run_undo(self, everything: bool = False) -> None:
        now = time.monotonic()
        due = [u for u in self.undo if everything or u[0] <= now]
        self.undo = [u for u in self.undo if u not in due]
        for _, what, fn in due:
            log(f"undo: {what}")
            fn()

    def inject(self, kind: str) -> None:
        """Inject one fault of ``kind`` (or count it skipped: no target for it now)."""
        rng, cluster, ns = self.rng, self.cluster, self.ns
        what = kind
        if kind == "operator":
            self.operator.kill()
            time.sleep(rng.uniform(0, 3))
            self.operator.start().wait_ready()
        elif kind == "control":
            seconds = rng.uniform(5, 20)
            what = f"control plane down for {seconds:.0f}s"
            log(what)
            with faults.control_plane_down(cluster, seconds):
                pass
        elif kind == "silence":
            if self.silenced:
                self.skipped[kind] += 1
                return
            node = rng.choice(sorted(n.metadata.name for n in cluster.core.list_node().items))
            faults.silence_node(cluster, node)
            self.silenced, what = node, f"silence {node}"
            self.later(rng.uniform(20, 80), f"revive {node}", functools.partial(self._revive, node))
        else:
            pod = self.running_worker()
            try:
                if pod and kind == "hold":
                    faults.hold_pod(cluster, ns, pod)
                    release = functools.partial(faults.release_pod, cluster, ns, pod)
                    self.later(rng.uniform(5, 20), f"release {pod}", release)
                if pod:
                    cluster.core.delete_namespaced_pod(pod, ns)
                    what = f"{'hold and ' if kind == 'hold' else ''}delete {pod}"
            except client.ApiException as exc:
                # Gone, or already being deleted (no finalizer may be added then): no target.
                gone = exc.status == 404 or (exc.status == 422 and "finalizers" in str(exc.body))
                if not gone:
                    raise
                pod = None
            if not pod:
                self.skipped[kind] += 1
                return
        self.injected[kind] += 1
        log(f"fault: {what}")

    def _revive(self, node: str) -> None:
        faults.revive_node(cluster=self.cluster, node=node)
        self.silenced = None

    def run(self, settle: float) -> tuple[dict[str, str], list[str], list[str]]:
        """The faulty phase, then the settling; returns phases, verify problems, duplicates."""
        start, minutes = time.monotonic(), self.minutes
        deadline = start + minutes * 60
        next_wave, next_fault, waves, count = start, start + 3, 0, 0
        max_waves, max_faults = int(minutes * 4) + 1, int(minutes * 15) + 1
        while time.monotonic() < deadline:
            self.check()
            self.run_undo()
            if time.monotonic() >= next_wave and waves < max_waves:
                waves += 1
                self.wave(waves)
                next_wave = time.monotonic() + 15
            if time.monotonic() >= next_fault and count < max_faults:
                if not self.order:
                    self.order = self.rng.sample(FAULTS, len(FAULTS))
                count += 1
                self.inject(self.order.pop())
                next_fault = time.monotonic() + self.rng.uniform(4, 10)
            time.sleep(0.5)
        log("faulty phase over; undoing what is still in force")
        self.run_undo(everything=True)
        settle_by = time.monotonic() + settle
        phases: dict[str, str] = {}
        while time.monotonic() < settle_by:
            self.check()
            phases = run_until_done(self.cluster, self.ns, self.jobs, timeout=5)
            if all(p in FINISHED for p in phases.values()):
                break
        log(f"settled in {time.monotonic() - deadline:.0f}s")
        problems = verify(self.cluster, self.ns, self.jobs, ledger=self.ledger)
        return phases, problems, self.ledger.duplicates()

    def lost(self, phases: dict[str, str]) -> list[str]:
        """Workers the operator never (re)created: of a job that did not end as expected,
        the workers of its current attempt that the Ledger never saw as a pod."""
        seen = {(r.job, r.index, r.attempt) for r in self.ledger.snapshot()}
        missing = []
        for job in self.jobs:
            if phases.get(job.name) == job.expected_phase:
                continue
            obj = ddpjobs.get(self.cluster, self.ns, job.name) or {}
            attempt = int((obj.get("status") or {}).get("restarts") or 0)
            missing += [
                f"{job.name} worker {i} attempt {attempt}"
                for i in range(job.nodes)
                if (job.name, i, attempt) not in seen
            ]
        return missing

    def stop(self) -> None:
        self.run_undo(everything=True)
        self.operator.stop()
        self.kubelet.stop()
        self.ledger.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--settle", type=float, default=180)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    log(f"seed {seed} (repeat: make chaos CHAOS_SEED={seed}); {args.minutes} minutes")
    cluster = connect()
    assert cluster.local, "make chaos injects faults into the local cluster only (unset KUBECONFIG)"
    chaos = Chaos(cluster, seed, args.minutes)
    try:
        chaos.start()
        phases, problems, dups = chaos.run(args.settle)
        lost = chaos.lost(phases)
        chaos.stop()
    except BaseException:
        traceback.print_exc()
        log(f"the chaos run itself failed (seed {seed}); namespace {chaos.ns} kept")
        try:
            chaos.stop()
        except BaseException:
            traceback.print_exc()
        disconnect(cluster)
        return 2
    bad = report(chaos, phases, problems, dups, lost)
    if bad:
        log(f"FAILED (seed {seed}); namespace {chaos.ns} kept; operator log {chaos.operator.log}")
    else:
        cluster.core.delete_namespace(chaos.ns)
    disconnect(cluster)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
