"""Scripted jobs: a stand-in kubelet that ends worker pods as a script says, and a pod ledger.

* ``ScriptedJob``: a DDPJob whose workers exit as its ``kind`` says: ``succeed`` (every worker
  of every attempt exits 0), ``flaky`` (attempt 0: worker 1 exits 3, the others keep running;
  later attempts all exit 0), ``fail`` (every attempt: worker 1 exits 3, the others keep running).
* ``Kubelet``: once a worker pod has been Running ``run_seconds`` (its job's, or the
  Kubelet's), ends it with its script's exit code (through the ``pod-finish`` kwok stage,
  guarded by the pod's UID, so a later pod of the same name is never ended by mistake).
* ``Ledger``: every worker pod ever seen, by UID; ``duplicates()`` names a worker created twice.
* ``verify`` (harness.verify): the end state contradicts the scripts (phase, owner, restarts,
  worker counts); ``run_until_done`` waits for the jobs to finish.

Both threads outlive API server outages (``podwatch``); an error of their own is raised by
``stop()`` and ``check()``.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from . import pods as podctl
from .cluster import Cluster
from .podwatch import PodWatch, worker_key
from .verify import FINISHED, run_until_done, verify
from jobs import ddpjob

KINDS = ("succeed", "flaky", "fail")
__all__ = ["KINDS", "Kubelet", "Ledger", "PodRecord", "ScriptedJob", "run_until_done", "verify"]


@dataclass
class ScriptedJob:
    """A DDPJob and the exit code of each of its workers, by attempt."""

    name: str
    nodes: int = 2
    kind: str = "succeed"
    backoff_limit: int | None = None
    run_seconds: float | None = None  # how long its workers run; None: the Kubelet's default

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"kind {self.kind!r} is not one of {KINDS}"
        assert self.kind == "succeed" or self.nodes >= 2, f"{self.kind} needs a worker 1"
        if self.backoff_limit is None:
            self.backoff_limit = 2 if self.kind == "fail" else 8

    @property
    def expected_phase(self) -> str:
        return "Failed" if self.kind == "fail" else "Succeeded"

    def exit_code(self, attempt: int, index: int) -> int | None:
        """How worker ``index`` of ``attempt`` ends; None: it keeps running."""
        if self.kind == "succeed" or (self.kind == "flaky" and attempt > 0):
            return 0
        return 3 if index == 1 else None

    def manifest(self, ns: str) -> dict[str, Any]:
        """The DDPJob. Its pods have a zero grace period, so the API server removes a deleted
        one at once: kwok's pod-delete stage deletes by name with no UID precondition (a kubelet
        uses one), and acting late it deleted newer pods of the same name (the API server's audit
        log showed kwok-controller deleting a pod the operator had just re-created)."""
        job = ddpjob(self.name, ns, nodes=self.nodes, backoffLimit=self.backoff_limit)
        job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
        return job


def _by_name(jobs: list[ScriptedJob]) -> dict[str, ScriptedJob]:
    return {j.name: j for j in jobs}


class Kubelet(PodWatch):
    """Ends Running worker pods of the given jobs with their scripts' exit codes."""

    def __init__(
        self, cluster: Cluster, ns: str, jobs: list[ScriptedJob], run_seconds: float = 0.5
    ):
        super().__init__(cluster, ns)
        self.own = dataclasses.replace(cluster, api=self.api, started_here=False)
        self.scripts = _by_name(jobs)
        self.run_seconds = run_seconds
        self.finished: dict[str, tuple[str, int | None]] = {}  # uid -> (pod, exit code)
        self._running: dict[str, tuple[str, int | None, float]] = {}  # uid -> pod, code, due
        self._lock = threading.Lock()
        self._threads.append(threading.Thread(target=self._guard, args=(self._act,), daemon=True))

    def add(self, job: ScriptedJob) -> None:
        """Script one more job (before or after start)."""
        with self._lock:
            self.scripts[job.name] = job

    def relisted(self, pods: list[dict[str, Any]]) -> None:
        seen = {p["metadata"]["uid"] for p in pods}
        with self._lock:
            for uid in set(self._running) - seen:
                del self._running[uid]
        for pod in pods:
            self.changed("MODIFIED", pod)

    def changed(self, type_: str, pod: dict[str, Any]) -> None:
        meta, key = pod["metadata"], worker_key(pod)
        uid = meta["uid"]
        with self._lock:
            script = self.scripts.get(key[0]) if key else None
            running = (pod.get("status") or {}).get("phase") == "Running"
            live = type_ != "DELETED" and not meta.get("deletionTimestamp") and running
            if not (script and key and live):
                self._running.pop(uid, None)
            elif uid not in self._running and uid not in self.finished:
                code = script.exit_code(key[2], key[1])
                runs = self.run_seconds if script.run_seconds is None else script.run_seconds
                self._running[uid] = (meta["name"], code, time.monotonic() + runs)

    def _act(self) -> None:
        outage: float | None = None
        while not self.stopped:
            now = time.monotonic()
            with self._lock:
                due = [(u, r) for u, r in self._running.items() if now >= r[2]]
            for uid, (name, code, _) in due:
                if code is not None:
                    try:
                        podctl.finish(self.own, self.ns, name, code, uid=uid)
                    except Exception as exc:
                        if not _gone(exc):
                            outage = self.retry(exc, outage)
                            continue
                    outage = None
                with self._lock:
                    self._running.pop(uid, None)
                    self.finished[uid] = (name, code)
            self._stopped.wait(0.05)


def _gone(exc: Exception) -> bool:
    """The pod is gone (404), or replaced by one of the same name (422: uid is immutable)."""
    status = getattr(exc, "status", None)
    return status == 404 or (status == 422 and "metadata.uid" in str(getattr(exc, "body", "")))


@dataclass
class PodRecord:
    """One worker pod as the ledger saw it; ``live``: from its first sighting until it was
    seen gone or finished (Succeeded/Failed), in the ledger's own event order."""

    job: str
    index: int
    attempt: int
    name: str
    uid: str
    first_seen: float
    deleted: float | None = None
    live: list[int] = field(default_factory=list)  # [first seq, end seq or none yet]
    clock: float = field(default_factory=lambda: time.time() - time.monotonic())
    phase: str = "Pending"  # the last seen
    node: str | None = None
    asked: bool = False  # its deletion was requested (seen terminating) before it went

    def describe(self) -> str:
        """The pod, when it was seen (wall clock) and how it ended."""

        def at(t: float | None) -> str:
            if t is None:
                return "-"
            return time.strftime("%H:%M:%S", time.localtime(t + self.clock)) + f"{t % 1:.3f}"[1:]

        ended = "deletion asked" if self.asked else "no deletion asked"
        seen, gone = at(self.first_seen), at(self.deleted)
        return f"{self.uid} seen {seen}, gone {gone}, {ended}, {self.phase}"


class Ledger(PodWatch):
    """Every worker pod of the namespace ever seen, by UID."""

    def __init__(self, cluster: Cluster, ns: str):
        super().__init__(cluster, ns)
        self.records: dict[str, PodRecord] = {}
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def relisted(self, pods: list[dict[str, Any]]) -> None:
        seen = {p["metadata"]["uid"] for p in pods}
        with self._lock:
            for rec in self.records.values():
                if rec.uid not in seen and rec.deleted is None:
                    self._end(rec, gone=True)
        for pod in pods:
            self.changed("MODIFIED", pod)

    def changed(self, type_: str, pod: dict[str, Any]) -> None:
        key = worker_key(pod)
        if key is None:
            return
        meta = pod["metadata"]
        with self._lock:
            rec = self.records.get(meta["uid"])
            if rec is None:
                rec = PodRecord(*key, meta["name"], meta["uid"], time.monotonic())
                rec.live = [next(self._seq)]
                self.records[rec.uid] = rec
            rec.phase = (pod.get("status") or {}).get("phase") or rec.phase
            rec.node = (pod.get("spec") or {}).get("nodeName") or rec.node
            if type_ != "DELETED" and meta.get("deletionTimestamp"):
                rec.asked = True
            if type_ == "DELETED":
                self._end(rec, gone=True)
            elif rec.phase in FINISHED:
                self._end(rec, gone=False)

    def _end(self, rec: PodRecord, gone: bool) -> None:
        if len(rec.live) == 1:
            rec.live.append(next(self._seq))
        if gone and rec.deleted is None:
            rec.deleted = time.monotonic()

    def snapshot(self) -> list[PodRecord]:
        """Copies of the records, as of now."""
        with self._lock:
            return [dataclasses.replace(r, live=list(r.live)) for r in self.records.values()]

    def duplicates(self) -> list[str]:
        """Workers of one attempt created more than once; two live pods of one worker index."""
        recs = self.snapshot()
        found = []
        by_attempt: dict[tuple[str, int, int], list[PodRecord]] = defaultdict(list)
        by_index: dict[tuple[str, int], list[PodRecord]] = defaultdict(list)
        for rec in recs:
            by_attempt[rec.job, rec.index, rec.attempt].append(rec)
            by_index[rec.job, rec.index].append(rec)
        for (job, index, attempt), same in sorted(by_attempt.items()):
            if len(same) > 1:
                uids = ", ".join(r.describe() for r in same)
                what = f"{job} worker {index} attempt {attempt}: {len(same)} pods ({uids})"
                found.append(what)
        for (job, index), same in sorted(by_index.items()):
            same.sort(key=lambda r: r.live[0])
            for a, b in itertools.pairwise(same):
                if len(a.live) == 1 or a.live[1] > b.live[0]:
                    found.append(
                        f"{job} worker {index}: {a.name} {a.uid} (attempt {a.attempt}) and "
                        f"{b.uid} (attempt {b.attempt}) were live at once"
                    )
        return found
