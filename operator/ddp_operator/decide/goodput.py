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
* the time it cost, on ``firstFailure``: ``detectedSeconds`` from the failure (the earlier of
  the training's last advance, as reported, and the container's end: a hang ended by a
  collective's own timeout cost all the time it hung) to its detection (``detectedAt``),
  ``recomputeSeconds``, the lost steps at the attempt's seconds per step; once the next
  attempt shows them (``recovered``), ``runningAgainSeconds`` and ``firstStepSeconds`` from
  the failure to the group running again and to its first report.
  ``status.goodput.lostSeconds`` sums each failure's ``firstStepSeconds`` and
  ``recomputeSeconds``;
* ``restartsWithoutProgress``: the attempts in a row since the last that advanced that ended
  without advancing, and where each ended (``diedAt``, as last reported; the resume step for
  one that never reported). A disruption (eviction, preemption, a lost node) neither counts
  nor ends the run: it is the cluster's doing, not the script's.

The job's effective training time ratio (ETTR, ``ratio``, written when it ends) is its useful
training time over its wall time: the steps it kept (its last step since the step its first report
said, ``startStep``) at the seconds per step its last attempt measured, over the time from its
``startTime``. What is not useful is the failures' time (``lostSeconds``), its start-up, and
whatever else held steps up (saves, evaluations).

Past ``maxRestartsWithoutProgress`` such attempts, a restart becomes the job's failure, reason
``NoProgress`` (NVIDIA's fault-tolerance launcher stops after 3 restarts without progress, exit
93 "do not resubmit"): a corrupt checkpoint or a bad shard fails the same way every time, and
``backoffLimit`` would only burn devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ..model import constants as c
from ..model import failure_policy as fp
from ..model.jobspec import JobSpec
from .conditions import condition, format_time, parse_time
from .failure_policy import Bound, Verdict

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
    now: datetime,
) -> Account | None:
    """The account of ``attempt``, ended by ``verdict`` now (None: it does not end the
    attempt, the job has never reported, or the attempt was accounted already)."""
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
        **before,
        "attempt": attempt,
        "failures": int(before.get("failures") or 0) + 1,
        "stepsLost": int(before.get("stepsLost") or 0) + (lost or 0),
        "highestStep": _most(high_step, last),
        "highestCheckpoint": _most(high_mark, _int(checkpoint.get("step"))),
        "restartsWithoutProgress": run,
        "diedAt": died,
    }
    # The training stopped at the earlier of its last advance and the container's end: a hang
    # (stall detection off, a collective's own timeout ended it) cost the time it hung.
    stopped = [parse_time(verdict.first.time)]
    if reported:
        stopped.append(parse_time((progress or {}).get("advanced")))
    failed = min((t for t in stopped if t is not None), default=None)
    step_seconds = (progress or {}).get("stepSeconds") if reported else None
    costs = {
        "lastStep": last,
        "resumeStep": resume,
        "stepsLost": lost,
        "detectedAt": format_time(now),
        "detectedSeconds": _seconds(now - failed) if failed else None,
        "recomputeSeconds": _seconds(lost * float(step_seconds)) if lost and step_seconds else None,
    }
    return Account(
        {k: v for k, v in goodput.items() if v is not None},
        {k: v for k, v in costs.items() if v is not None},
    )


def _seconds(value: timedelta | float) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return round(max(0.0, seconds), 1)


def bound(job: JobSpec, verdict: Verdict, ended: Account | None) -> Verdict:
    """``verdict``, unless it restarts a group past ``maxRestartsWithoutProgress`` attempts in
    a row without progress: then the job fails, reason NO_PROGRESS, naming where they ended."""
    if ended is None or verdict.action not in (fp.RESTART_GROUP, fp.RESTART_GROUP_NOT_COUNTED):
        return verdict
    most = job.failure_policy.max_restarts_without_progress
    run = int(ended.goodput["restartsWithoutProgress"])
    if run <= most:
        return verdict
    best = ended.goodput.get("highestStep")
    mark = ended.goodput.get("highestCheckpoint")
    past = f"step {best}" if best is not None else "the first report"
    if mark is not None:
        past += f" or checkpoint {mark}"
    steps = tuple(ended.goodput["diedAt"])
    held = Bound("maxRestartsWithoutProgress", run, most, False, steps, past)
    return replace(verdict, action=fp.FAIL_JOB, reason=NO_PROGRESS, bound=held, handovers=())


def record(new: dict[str, Any], ended: Account | None) -> None:
    """Write the account into the status being written (``new``: its ``firstFailure`` is the
    ended attempt's, ``failure_policy.record``)."""
    if ended is None:
        return
    new["goodput"] = ended.goodput
    if new.get("firstFailure"):
        new["firstFailure"] = {**new["firstFailure"], **ended.costs}


def recovered(
    new: dict[str, Any],
    status: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    progress: Mapping[str, Any] | None,
    attempt: int,
) -> None:
    """Complete the last failure's account in the status being written (``new``) once the
    attempt after it shows it: its group running (the ``Running`` condition since its
    detection), its first report (``progress.since``); the latter adds the failure's time to
    ``goodput.lostSeconds``, once."""
    first = new.get("firstFailure") or {}
    detected = parse_time(first.get("detectedAt"))
    if detected is None or first.get("attempt") != attempt - 1 or "firstStepSeconds" in first:
        return
    failed = detected - timedelta(seconds=float(first.get("detectedSeconds") or 0))
    out = dict(first)
    running = condition(conditions, c.COND_RUNNING) or {}
    since = parse_time(running.get("lastTransitionTime"))
    if running.get("status") == "True" and since is not None and since >= detected:
        out.setdefault("runningAgainSeconds", _seconds(since - failed))
    began = parse_time((progress or {}).get("since"))
    if progress and progress.get("attempt") == attempt and began is not None:
        out["firstStepSeconds"] = _seconds(began - failed)
        ledger = dict(new.get("goodput") or status.get("goodput") or {})
        lost = float(ledger.get("lostSeconds") or 0) + out["firstStepSeconds"]
        ledger["lostSeconds"] = round(lost + float(first.get("recomputeSeconds") or 0), 1)
        new["goodput"] = ledger
    if out != first:
        new["firstFailure"] = out


RECOVERY = ("runningAgainSeconds", "firstStepSeconds")  # a failure's costs seen after it


def same_failure(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two ``firstFailure`` are the same failure (``recovered`` completes one later)."""

    def bare(f: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: v for k, v in (f or {}).items() if k not in RECOVERY}

    return bare(a) == bare(b)


def begin(
    new: dict[str, Any], status: Mapping[str, Any], progress: Mapping[str, Any] | None
) -> None:
    """Open the job's account at its first report: the step it began from (``startStep``; a job
    that resumed another's checkpoint did not do the steps before it)."""
    if status.get("goodput") or new.get("goodput") or not progress:
        return
    if (first := _int(progress.get("sinceStep"))) is not None:
        new["goodput"] = {"startStep": first}


def ratio(
    status: Mapping[str, Any], progress: Mapping[str, Any] | None, now: datetime
) -> float | None:
    """The job's effective training time ratio now (or at its completion): None before its
    account opened or its last attempt measured its seconds per step."""
    ledger, start = status.get("goodput") or {}, parse_time(status.get("startTime"))
    end = parse_time(status.get("completionTime")) or now
    step, first = _int((progress or {}).get("step")), _int(ledger.get("startStep"))
    each = (progress or {}).get("stepSeconds")
    if start is None or end <= start or step is None or first is None or not each:
        return None
    useful = max(0, step - first + 1) * float(each)
    return round(min(1.0, useful / (end - start).total_seconds()), 3)


def settle(
    new: dict[str, Any],
    status: Mapping[str, Any],
    progress: Mapping[str, Any] | None,
    now: datetime,
) -> None:
    """At the job's end: its ratio on its account (``ratio``), once."""
    ledger = new.get("goodput") or status.get("goodput")
    if ledger and "ratio" not in ledger:
        value = ratio({**status, **new, "goodput": ledger}, progress, now)
        if value is not None:
            new["goodput"] = {**ledger, "ratio": value}
