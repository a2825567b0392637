"""The failures of an attempt as facts: which workers failed, vanished or are being removed, how
(exit code, signal, reason, pod conditions, disruption), when, and their last words; ordered
first failure first. Pure: the observed pods (and the last state of those gone) in.

The order is by when each failure happened (the container's ``finishedAt``, a disruption's
time); within a second (the API's resolution) a failure whose message looks like the
consequence of another rank's (a collective's broken connection) comes after, then by index.
A failure with no time (a pod deleted) comes last. Then the cause wins over its echo: where the
first is collateral and a failure that is not collateral happened within
``COLLATERAL_WINDOW`` of it (a root pod's ``finishedAt`` includes torchrun tearing its other
ranks down), the earliest such failure goes first.

A failure's words are its termination message's, or its log's where the message held no
exception and the job loop read the log (``failure_logs``: ``WorkerFailure.ask`` says which).
An order whose first failure's words are not sure is not acted on: every log that may change
it is read first (``to_read``), the echo's and the cause's alike, then the failures are ordered
again, each by its own words.
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from ..manifests.builders import worker_name
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import failure_logs, last_words, outcomes
from .conditions import format_time

# Reasons of the pod (status.reason) that say the control plane took it away.
DISRUPTED_REASONS = frozenset(("Evicted", "NodeLost", "Preempted", "Preempting"))
DELETED = "Deleted"  # a pod deleted by someone, with no disruption condition
STALLED = "Stalled"  # the training stopped advancing (``hangs``, ``quiet``)
STUCK = "RestartStuck"  # an in-place restart not done in time
# A collateral failure this close to one that is not never decides the attempt.
COLLATERAL_WINDOW = timedelta(seconds=5)


@dataclass(frozen=True)
class WorkerFailure:
    """One failed worker of an attempt, as observed."""

    index: int
    pod: str
    reason: str
    node: str | None = None
    container: str | None = None
    exit_code: int | None = None
    message: str = ""  # the termination message (its last lines), or the API's
    time: str | None = None  # when it ended (RFC 3339), if known
    conditions: tuple[tuple[str, str], ...] = ()  # the pod's True conditions (type, reason)
    disruption: bool = False  # the control plane took the pod away: no fault of the training
    gone: bool = False  # its pod is gone (else: it ended, or is being deleted)
    finished: bool = True  # its pod ended (Failed) before it was removed
    uid: str | None = None  # its pod's
    previous: bool = False  # the run that ended is its container's previous one
    log: failure_logs.LogRead | None = None  # its log, if the job loop read it

    @property
    def signal(self) -> str | None:
        """SIGKILL for exit code 137 (128 + a known signal's number), else None."""
        if self.exit_code is None or self.exit_code <= 128:
            return None
        try:
            return signal.Signals(self.exit_code - 128).name
        except ValueError:
            return None

    @cached_property
    def told(self) -> tuple[last_words.LastWords, str]:
        """Its last words and where they came from (``failure_logs.chosen``), read once (the
        message, the order and the status all use them)."""
        return failure_logs.chosen(last_words.read(self.message, self.exit_code), self.log)

    @property
    def words(self) -> last_words.LastWords:
        return self.told[0]

    @property
    def source(self) -> str | None:
        """Where its words came from: its termination message or its log (None: no container
        of it ended)."""
        return None if self.exit_code is None else self.told[1]

    def ask(self, attempt: int) -> failure_logs.LogAsk | None:
        """Its log to read, if its words want it and it was not read: a container of a pod still
        there that ended non-zero, its message holding no exception and maybe cut short."""
        if self.index < 0 or self.gone or not self.uid or self.log is not None:
            return None
        if not failure_logs.needed(self.words, self.exit_code, self.message):
            return None
        return failure_logs.LogAsk(
            self.pod,
            self.uid,
            self.container,
            self.previous,
            attempt,
            self.message,
            self.exit_code,
        )

    def describe(self) -> str:
        """What happened, in one line: the pod, how it ended, where, its first words (a stall:
        its message, which names the worker that hung, if one was found)."""
        if self.index < 0 or self.reason == STALLED:
            return self.message
        words = self.words
        where = f" on node {self.node}" if self.node else ""
        said = f": {words.summary}" if words.summary else ""
        if not said and self.signal and words.lines:  # its output goes on, no exception in it
            said = ": no exception in its output"
        if self.source == failure_logs.LOG:
            said += " (read from its log)"
        elif self.log is not None and self.log.error:
            said += f" (its log could not be read: {self.log.error})"
        if self.exit_code is not None:
            ranks = (
                f"rank {words.rank}" if words.rank is not None else "",
                f"local rank {words.local_rank}" if words.local_rank is not None else "",
            )
            rank = f" ({', '.join(filter(None, ranks))})" if any(ranks) else ""
            killed = self.signal and f"killed by {self.signal}"
            extra = ", ".join(filter(None, (self.reason, killed)))
            how = f"exited with code {self.exit_code}" + (f" ({extra})" if extra else "")
            return f"{self.pod}{rank} {how}{where}{said}"
        went = "was deleted" if self.gone else "is being deleted"
        if self.reason == DELETED:
            return f"{self.pod} {went}" + ("" if self.gone else f" ({self.message})")
        if self.reason == "NodeLost":
            return f"{self.pod} was lost with its node {self.node} ({self.message})"
        if self.disruption and not self.finished:
            return f"{self.pod} {went}: {self.reason} ({self.message})"
        return f"{self.pod} failed: {self.reason}{where}{said}"


def of_pod(
    pod: WorkerPod, gone: bool = False, log: failure_logs.LogRead | None = None
) -> WorkerFailure:
    """The failure of a pod that ended Failed, is being removed, or is ``gone`` (``log``: its
    log, read)."""
    disruption = pod.disruption
    reason = pod.reason or "Error"
    time = pod.finished_at
    message = pod.message or ""
    if pod.phase != "Failed" and not pod.failed_in_place:  # removed before it ended
        if pod.node_lost:
            reason, message = "NodeLost", pod.node_lost
            time = disruption.time if disruption is not None else None
        elif disruption is not None:
            reason, message, time = disruption.reason, disruption.message, disruption.time
        else:
            reason, time = DELETED, _asked_to_go(pod)
            message = "" if gone else "no disruption condition: deleted by a user or a controller"
    elif disruption is not None and not time:
        time = disruption.time
    return WorkerFailure(
        index=pod.index,
        pod=pod.name,
        reason=reason,
        node=pod.node,
        container=pod.container,
        exit_code=pod.exit_code if pod.phase == "Failed" or pod.failed_in_place else None,
        message=message,
        time=time,
        conditions=pod.conditions,
        disruption=bool(disruption is not None or pod.node_lost or reason in DISRUPTED_REASONS),
        gone=gone,
        finished=pod.phase == "Failed" or pod.failed_in_place,
        uid=pod.uid,
        previous=pod.previous_run,
        log=log,
    )


def collect(
    job: JobSpec,
    current: Mapping[int, WorkerPod],
    created: bool,
    seen: Collection[tuple[str, int]],
    attempt: int,
    excused: Collection[tuple[str, int]] = (),
    last: Mapping[tuple[str, int], WorkerPod] | None = None,
    logs: Mapping[tuple[str, int], failure_logs.LogRead] | None = None,
) -> list[WorkerFailure]:
    """The failures of ``attempt``, first first. A missing worker has vanished if the whole
    group had been created, or if its pod of this attempt was seen before (``seen``: (pod name,
    attempt); ``last``: its last state, if the watch showed it going); else it is yet to be
    created. One whose pod Kueue removed, or that is being replaced (``excused``), has not.
    ``logs``: the logs read, by (pod UID, attempt)."""
    found: list[WorkerFailure] = []
    for i in range(job.nodes):
        pod = current.get(i)
        key = (worker_name(job, i), attempt)
        if pod is None:
            if key in excused or not (created or key in seen):
                continue
            before = (last or {}).get(key)
            found.append(
                of_pod(before, gone=True)
                if before is not None
                else WorkerFailure(i, key[0], DELETED, gone=True, finished=False)
            )
        elif (
            outcomes.phase(pod, attempt) == "Failed"
            or (pod.failed_in_place and pod.attempt_now == attempt)
            or (pod.deleting and pod.phase != "Succeeded")
        ):
            log = (logs or {}).get((pod.uid or "", attempt))
            found.append(of_pod(pod, gone=False, log=log))
    return ordered(found)


def _asked_to_go(pod: WorkerPod) -> str | None:
    """When a pod's deletion was asked for: its deletionTimestamp less its grace period."""
    end = _when(pod.deletion_time)
    if end is None:
        return None
    return format_time(end - timedelta(seconds=int(pod.deletion_grace or 0)))


def ordered(failures: list[WorkerFailure]) -> list[WorkerFailure]:
    """First failure first (see the module docstring)."""
    found = sorted(
        failures, key=lambda f: (f.time is None, f.time or "", f.words.collateral, f.index)
    )
    first = found[0] if found else None
    if first is None or not first.words.collateral or (since := _when(first.time)) is None:
        return found
    cause = next(
        (
            f
            for f in found
            if not f.words.collateral
            and (when := _when(f.time)) is not None
            and when - since <= COLLATERAL_WINDOW
        ),
        None,
    )
    return found if cause is None else [cause, *(f for f in found if f is not cause)]


def to_read(failures: list[WorkerFailure], attempt: int) -> list[failure_logs.LogAsk]:
    """The logs to read before ``failures`` (ordered, first first) decide: none where the first
    one's words are sure (its message holds its exception, its log was read or cannot be);
    else the first's and those of every failure that wants its log read and ended within
    ``COLLATERAL_WINDOW`` of the earliest (once read, the first may be an echo and one of them
    its cause), ``failure_logs.MAX_READS`` at most, first first."""
    first = failures[0] if failures else None
    if first is None or first.ask(attempt) is None:
        return []
    since = min((w for f in failures if (w := _when(f.time)) is not None), default=None)

    def near(f: WorkerFailure) -> bool:
        when = _when(f.time)
        return since is not None and when is not None and when - since <= COLLATERAL_WINDOW

    asks = [a for f in failures if (f is first or near(f)) and (a := f.ask(attempt))]
    return asks[: failure_logs.MAX_READS]


def _when(time: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(time) if time else None
    except ValueError:
        return None


def stuck(messages: list[str]) -> list[WorkerFailure]:
    """In-place restarts not done in time, as failures (of no one worker: index -1)."""
    return [WorkerFailure(-1, "", STUCK, message=m) for m in messages]
