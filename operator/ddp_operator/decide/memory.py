"""What a job loop remembers between passes, beyond what the watch shows it.

The watch-fed index shows the job's pods as they are now; the planner also needs to know which
pods of the current attempt existed before (a worker whose pod is gone has failed and is never
re-created in the same attempt), and the loop needs the status it wrote last (a pass may run
before the watch echoes that write back). Pure: no I/O.

Every pod is keyed by (name, the attempt it runs: ``WorkerPod.attempt_now``), the key the
planner looks a worker's loss up by: an in-place pod created in one attempt and told a later
one is of the later one, seen and lost alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..model.constants import FINISHED_PHASES
from ..model.workers import WorkerPod


def _key(pod: WorkerPod) -> tuple[str, int]:
    """A pod as remembered: its name and the attempt it runs."""
    return pod.name, pod.attempt_now


class Memory:
    """The status last written, the (name, attempt run) of the job's own pods known to have
    existed, those Kueue stopped (and why), the UIDs of pods the loop itself deleted, and the
    last state of own pods that went otherwise (``failure_facts``: how they failed)."""

    def __init__(self, status: Mapping[str, Any] | None = None):
        self.status: dict[str, Any] = dict(status or {})
        self.seen: set[tuple[str, int]] = set()
        self.evicted: dict[tuple[str, int], str] = {}
        self.removed: set[str] = set()
        self.requested: dict[tuple[str, int], float] = {}  # created, not yet seen: since when
        self.last: dict[tuple[str, int], WorkerPod] = {}  # own pods gone: as the watch last saw

    def unasked(self, keys: Mapping[int, tuple[str, int]], now: float, ttl: float) -> list[int]:
        """The workers (index: (name, attempt)) that the loop did not create within ``ttl``
        seconds before ``now``, or that a pass has seen since."""
        return [i for i, k in keys.items() if now - self.requested.get(k, float("-inf")) >= ttl]

    @property
    def attempt(self) -> int:
        return int(self.status.get("restarts") or 0)

    def adopt(self, observed: Mapping[str, Any] | None) -> bool:
        """Take an observed status if it is further on than the one remembered (a later
        attempt, or finished): written by an earlier operator whose last requests landed after
        this one had read the job. Returns whether it was taken."""
        observed = observed or {}
        later = int(observed.get("restarts") or 0) > self.attempt
        finished = (
            observed.get("phase") in FINISHED_PHASES
            and self.status.get("phase") not in FINISHED_PHASES
        )
        if later or finished:
            self.status = dict(observed)
        return later or finished

    def passed(self, own: Iterable[WorkerPod], attempt: int, suspended: bool) -> None:
        """After a plan: remember the own pods observed in it; forget earlier attempts (and
        everything while suspended: those pods are deleted on purpose)."""
        own = list(own)
        if suspended:
            self.seen, self.evicted, self.requested, self.last = set(), {}, {}, {}
            return
        self.last = {k: p for k, p in self.last.items() if k[1] >= attempt}
        # Kueue evicts a group whole: once one pod is stopped, every pod of the group is.
        why = next((p.stopped for p in own if p.stopped), None)
        # A pod the loop is deleting is no worker of the group (an in-place pod built again).
        live = set() if why else {_key(p) for p in own if p.uid not in self.removed}
        self.evicted = {k: v for k, v in self.evicted.items() if k[1] >= attempt and k not in live}
        if why:
            self.evicted.update((_key(p), p.stopped or why) for p in own)
        earlier = {s for s in self.seen if s[1] >= attempt and s not in self.evicted}
        self.seen = live | earlier
        present = {_key(p) for p in own}
        self.requested = {
            k: t for k, t in self.requested.items() if k[1] >= attempt and k not in present
        }

    def deleting(self, pods: Iterable[WorkerPod]) -> None:
        """The loop is deleting these pods: their going is no failure."""
        for pod in pods:
            if pod.uid:
                self.removed.add(pod.uid)
                self.seen.discard(_key(pod))

    def gone(self, pod: WorkerPod, job_uid: str | None) -> None:
        """A pod with the job's labels was deleted. If it was the job's own and the loop did not
        delete it, its worker counts as failed, even if no pass saw the pod while it existed
        (created and deleted between two passes)."""
        if pod.uid in self.removed:
            self.removed.discard(pod.uid)
        elif job_uid is not None and pod.owner_uid == job_uid and pod.stopped:
            self.evicted[_key(pod)] = pod.stopped
            self.seen.discard(_key(pod))
        elif job_uid is not None and pod.owner_uid == job_uid:
            self.seen.add(_key(pod))
            self.last[_key(pod)] = pod  # how it went (a disruption?)
