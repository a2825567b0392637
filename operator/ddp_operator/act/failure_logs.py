"""A job loop's reads of its failures' logs (which, and how: ``decide/failure_logs``): those a
plan asks for, read together before the plan that acts on the failures (the loop then plans
again with them), each once per failed attempt and pod (remembered by (job UID, pod UID,
attempt), never read again in a later pass: an elastic attempt reads each replaced worker's).
A read that fails or takes longer than TIMEOUT_SECONDS never holds the restart up: the reads
run at once, and a failure whose log could not be read is named from its termination message
and says why. Each read is told on the job by an Event (``FailureLogRead``, or
``FailureLogUnreadable`` as a Warning: a Forbidden there is the chart's Role without
``pods/log``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import kopf

from ..api.kube import Kube
from ..decide import failure_logs as fl
from ..decide.conditions import format_time
from ..decide.failures import api_message, classify
from ..model.jobspec import JobSpec

log = logging.getLogger(__name__)

Post = Callable[..., Any]  # kopf.event's signature: (body, type=, reason=, message=)


class FailureLogs:
    """The logs one job loop has read, by (job UID, pod UID, attempt): the latest attempt's."""

    def __init__(self, kube: Kube, post: Post = kopf.event) -> None:
        self.kube = kube
        self.post = post
        self.reads: dict[tuple[str, str, int], fl.LogRead] = {}  # (job, pod, attempt)

    def known(self, job: JobSpec) -> Mapping[tuple[str, int], fl.LogRead]:
        """The job's logs read, by (pod UID, attempt), as ``reconcile.plan`` takes them."""
        return {r.key: r for (uid, _, _), r in self.reads.items() if uid == job.uid}

    async def read(self, job: JobSpec, asks: Sequence[fl.LogAsk], body: Mapping[str, Any]) -> bool:
        """Read the logs a plan asks for at once, but those read for this attempt of the job
        already; post an Event for each on ``body``. Returns whether it read any (the loop then
        plans again)."""
        fresh = [a for a in asks if (job.uid or "", a.uid, a.attempt) not in self.reads]
        if not fresh:
            return False
        self.reads = {k: r for k, r in self.reads.items() if k[2] >= fresh[0].attempt}
        done = await asyncio.gather(*(self._read(job, ask) for ask in fresh))
        at = format_time(datetime.now(UTC))
        for ask, read in zip(fresh, done, strict=True):
            read = dataclasses.replace(read, at=at)
            self.reads[(job.uid or "", ask.uid, ask.attempt)] = read
            warning, reason, message = fl.said(ask, read)
            log.info("ddpjob %s/%s: %s", job.namespace, job.name, message)
            self.post(body, type="Warning" if warning else "Normal", reason=reason, message=message)
        return True

    async def _read(self, job: JobSpec, ask: fl.LogAsk) -> fl.LogRead:
        """One log, read within TIMEOUT_SECONDS; an error is named on the read, never raised."""
        try:
            text, capped = await asyncio.wait_for(
                self.kube.read_log(
                    job.namespace, ask.pod, ask.container, ask.previous, fl.TIMEOUT_SECONDS
                ),
                fl.TIMEOUT_SECONDS,
            )
        except TimeoutError:
            return fl.LogRead(ask.uid, ask.attempt, error=f"no answer in {fl.TIMEOUT_SECONDS:g}s")
        except Exception as exc:  # any error: named on the failure, never raised into the pass
            log.debug("reading %s's log: %s", ask.pod, api_message(exc))
            return fl.LogRead(ask.uid, ask.attempt, error=fl.unreadable(classify(exc)))
        return fl.LogRead(ask.uid, ask.attempt, fl.words_of(ask, text, capped), len(text.encode()))
