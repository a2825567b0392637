"""What each failed attempt cost the job, and the bound on restarts that never advance
(``spec.failurePolicy.maxRestartsWithoutProgress``). Pure: the job's status, the attempt's last
report and its verdict in; ``status.goodput``, the failure's costs and maybe another verdict out.

An attempt that ends (a group restart, or the job's end) is accounted once, from its last report
(``status.progress``) and the job's last checkpoint (``status.checkpoint``):

* its costs, on ``firstFailure``: ``lastStep`` (the step it last reported), ``resumeStep`` (the
  checkpoint's step, 0 with none: where the next attempt starts) and ``stepsLost`` (the steps
  between them, to be done again);
* whether it advanced: it reported a step beyond every earlier attempt's (``highestStep``), or
  said a checkpoint beyond the job's best (``highestCheckpoint``). One that never reported, in a
  job that reported before, did not (it died loading, or before its first report). A job that
  has never reported is not judged: nothing is known of its steps;
* ``restartsWithoutProgress``: the attempts in a row since the last that advanced that ended
  without advancing, and where each ended (``diedAt``, as last reported; the resume step for
  one that never reported). A disruption (eviction, preemption, a lost node) neither counts
  nor ends the run: it is the cluster's doing, not the script's.

Past ``maxRestartsWithoutProgress`` such attempts, a restart becomes the job's failure, reason
``NoProgress`` (NVIDIA's fault-tolerance launcher stops after 3 restarts without progress, exit
93 "do not resubmit"): a corrupt checkpoint or a bad shard fails the same way every time, and
``backoffLimit`` would only burn devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..model import failure_policy as fp
from ..model.jobspec import JobSpec
from .failure_policy import Verdict

NO_PROGRESS = "NoProgress"
MAX_DIED_AT = 10  # the steps kept of a run of attempts without progress
ENDS = (fp.RESTART_GROUP, fp.RESTART_GROUP_NOT_COUNTED, fp.FAIL_JOB)  # verdicts ending an attempt


@dataclass(frozen=True)
class Account:
    """An ended attempt's account: ``goodput``, the job's totals after it (``status.goodput``);
    ``costs``, its own (on ``firstFailure``)."""

    goodput: dict[str, Any]
    costs: dict[str, Any]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _most(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def account(
    status: Mapping[str, Any],
    progress: Mapping[str, Any] | None,
    attempt: int,
    verdict: Verdict,
) -> Account | None:
    """The account of ``attempt``, ended by ``verdict`` (None: it does not end the attempt, the
    job has never reported, or the attempt was accounted already)."""
    before = dict(status.get("goodput") or {})
    checkpoint = status.get("checkpoint") or {}
    accounted = _int(before.get("attempt"))
    if verdict.action not in ENDS or (accounted is not None and accounted >= attempt):
        return None
    reported = bool(progress) and (progress or {}).get("attempt") == attempt
    if not (before or checkpoint or reported):
        return None
    last = _int((progress or {}).get("step")) if reported else None
    resume = _int(checkpoint.get("step")) or 0
    saved = _int(checkpoint.get("step")) if checkpoint.get("attempt") == attempt else None
    high_step, high_mark = _int(before.get("highestStep")), _int(before.get("highestCheckpoint"))
    advanced = (last is not None and (high_step is None or last > high_step)) or (
        saved is not None and (high_mark is None or saved > high_mark)
    )
    lost = max(0, last - resume) if last is not None else None
    run, died = int(before.get("restartsWithoutProgress") or 0), list(before.get("diedAt") or [])
    if advanced:
        run, died = 0, []
    elif not verdict.first.disruption:
        run, died = run + 1, [*died, resume if last is None else last][-MAX_DIED_AT:]
    goodput = {
        "attempt": attempt,
        "failures": int(before.get("failures") or 0) + 1,
        "stepsLost": int(before.get("stepsLost") or 0) + (lost or 0),
        "highestStep": _most(high_step, last),
        "highestCheckpoint": _most(high_mark, _int(checkpoint.get("step"))),
        "restartsWithoutProgress": run,
        "diedAt": died,
    }
    costs = {"lastStep": last, "resumeStep": resume, "stepsLost": lost}
    return Account(
        {k: v for k, v in goodput.items() if v is not None},
        {k: v for k, v in costs.items() if v is not None},
    )


def bound(job: JobSpec, verdict: Verdict, ended: Account | None) -> Verdict:
    """``verdict``, unless it restarts a group past ``maxRestartsWithoutProgress`` attempts in
    a row without progress: then the job fails, reason NO_PROGRESS, naming where they ended."""
    if ended is None or verdict.action not in (fp.RESTART_GROUP, fp.RESTART_GROUP_NOT_COUNTED):
        return verdict
    most = job.failure_policy.max_restarts_without_progress
    run = int(ended.goodput["restartsWithoutProgress"])
    if run <= most:
        return verdict
    steps = ", ".join(map(str, ended.goodput["diedAt"]))
    best = ended.goodput.get("highestStep")
    mark = ended.goodput.get("highestCheckpoint")
    past = f"step {best}" if best is not None else "the first report"
    if mark is not None:
        past += f" or checkpoint {mark}"
    count = (
        f"{run} restarts in a row made no progress past {past}; they ended at steps {steps} "
        f"(maxRestartsWithoutProgress {most})"
    )
    return replace(verdict, action=fp.FAIL_JOB, reason=NO_PROGRESS, count=count)


def record(new: dict[str, Any], ended: Account | None) -> None:
    """Write the account into the status being written (``new``: its ``firstFailure`` is the
    ended attempt's, ``failure_policy.record``)."""
    if ended is None:
        return
    new["goodput"] = ended.goodput
    if new.get("firstFailure"):
        new["firstFailure"] = {**new["firstFailure"], **ended.costs}
