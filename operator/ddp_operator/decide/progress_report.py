"""The training's own progress (``ddp_operator.progress.report`` in the script): a report checked
and bounded into ``status.progress``, how it reads (percent, ETA, stale), and when it may be
written (``write_in``).

A step past ``total`` is clamped to ``total`` (a script that underestimated its steps reads as
done, its metrics still updated), not refused: refusing would stop its metrics and make the
script say so for a mistake that harms nothing once its writes are bounded. Whatever the
reports say, a job's status gets at most one progress write per interval; the first complete
report of an attempt may go at once, ahead of the interval, once.

A report marked ``stepless`` (``kubeflow_status``: Kubeflow's start, a percentage only) carries
the step the job knew, not one of its own: it never moves the step nor opens the attempt's step
clock (``since``/``sinceStep``), so that an attempt resumed at step 500 is timed from its first
real step, not from a step 0 it never made."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .conditions import format_precise, parse_time

MAX_METRICS = 8
PHASE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_PHASE_SECONDS = 7 * 86400
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,62}$")
MAX_STEP = 2**53  # JSON numbers stay exact
STALE_AFTER = 300.0  # seconds without a report before a running job's progress reads as stale
PROTOCOLS = ("kubeflow",)  # how a report came, if not by ``progress.report`` (``kubeflow_status``)


class BadReport(ValueError):
    """A report that is not one: its message names the field."""


def _count(payload: Mapping[str, Any], field: str, least: int) -> int | None:
    value = payload.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_STEP:
        raise BadReport(f"{field} must be an integer from {least} to {MAX_STEP}, not {value!r}")
    return value


def _metrics(raw: Any) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise BadReport("metrics must be an object of names to numbers")
    if len(raw) > MAX_METRICS:
        raise BadReport(f"metrics: at most {MAX_METRICS}, not {len(raw)}")
    out: dict[str, float] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not METRIC_NAME.match(name):
            raise BadReport(f"metrics: {name!r} is no metric name ({METRIC_NAME.pattern})")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            raise BadReport(f"metrics.{name} must be a finite number, not {value!r}")
        out[name] = float(value)
    return out


def normalize(payload: Any, now: datetime) -> dict[str, Any]:
    """``status.progress`` from a report's JSON, or BadReport naming the field at fault."""
    if not isinstance(payload, Mapping):
        raise BadReport("a report is a JSON object")
    step = _count(payload, "step", 0)
    if step is None:
        raise BadReport("step is required")
    total = _count(payload, "total", 1)
    eta = _count(payload, "etaSeconds", 0)
    attempt = _count(payload, "attempt", 0)
    if total is not None and step > total:
        step = total  # clamped: a script past its estimate reads as done
    progress: dict[str, Any] = {"step": step, "metrics": _metrics(payload.get("metrics"))}
    if total is not None:
        progress["total"] = total
        progress["percent"] = round(min(100.0, 100.0 * step / total), 1)
    if eta is not None and total is not None:
        progress["etaSeconds"] = 0 if step >= total else eta
        progress["eta"] = duration(progress["etaSeconds"])
    if attempt is not None:
        progress["attempt"] = attempt
    phase = payload.get("phase")
    if phase is not None:
        if not isinstance(phase, str) or not PHASE_NAME.match(phase):
            raise BadReport(f"phase must match {PHASE_NAME.pattern}, not {phase!r}")
        progress["phase"] = phase
        bound = _count(payload, "phaseTimeoutSeconds", 1)
        if bound is not None and bound > MAX_PHASE_SECONDS:
            raise BadReport(f"phaseTimeoutSeconds must be at most {MAX_PHASE_SECONDS}")
        if bound is not None:
            progress["phaseTimeoutSeconds"] = bound
    protocol = payload.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        raise BadReport(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    if protocol is not None:
        progress["protocol"] = protocol
    if payload.get("stepless") is True and "phase" not in progress:
        progress["stepless"] = True  # for ``carry`` only: never written
        said = payload.get("percent")  # a percentage of its own (Kubeflow's), shown as it is
        if isinstance(said, int) and not isinstance(said, bool) and 0 < said <= 100:
            progress["percent"] = float(said)
    progress["updated"] = format_precise(now)
    return progress


def carry(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` with its attempt's clock (``hangs`` reads it): ``since``/``sinceStep``, the
    attempt's first report; ``advanced``, when its step last changed; ``stepSeconds``, its
    seconds per step so far; ``phaseSince``, when its phase began. Carried from ``old``, the
    report before, if of the same attempt. A ``stepless`` report moves none of them: it keeps
    ``old``'s clock, or, the first of its attempt, starts the stall clock only (``advanced``)."""
    out = dict(new)
    if out.pop("stepless", False):
        return _stepless(old, out)
    if not old or old.get("attempt") != new.get("attempt") or not old.get("since"):
        out.update(since=new["updated"], sinceStep=new["step"], advanced=new["updated"])
        if new.get("phase"):
            out["phaseSince"] = new["updated"]
        return out
    if new.get("phase"):
        same = old.get("phase") == new["phase"] and old.get("phaseSince")
        out["phaseSince"] = old["phaseSince"] if same else new["updated"]
    ended = bool(old.get("phase")) and not new.get("phase")  # a phase over: the clock anew
    if ended:  # and the step interval is measured anew (the phase is no step's time)
        out.update(since=new["updated"], sinceStep=new["step"], advanced=new["updated"])
        if old.get("stepSeconds") is not None:
            out["stepSeconds"] = old["stepSeconds"]
        return out
    out.update(since=old["since"], sinceStep=int(old.get("sinceStep") or 0))
    moved = new["step"] != old.get("step")
    out["advanced"] = new["updated"] if moved else old.get("advanced") or new["updated"]
    steps = new["step"] - out["sinceStep"]
    start, now = parse_time(out["since"]), parse_time(new["updated"])
    if moved and steps > 0 and start is not None and now is not None:
        out["stepSeconds"] = round((now - start).total_seconds() / steps, 3)
    elif old.get("stepSeconds") is not None:
        out["stepSeconds"] = old["stepSeconds"]
    return out


_CLOCK = ("since", "sinceStep", "advanced", "stepSeconds")


def _stepless(old: Mapping[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A report without a step of its own (``carry``; its step is the one the job knew):
    ``old``'s clock, if of the same attempt, its stall clock moved on where its own percentage
    rose (a client that reports percentages only); else the attempt's stall clock starts (the
    script is alive) but no step interval opens: its first real step opens it."""
    if not old or old.get("attempt") != new.get("attempt"):
        new["advanced"] = new["updated"]
        return new
    new.update({k: old[k] for k in _CLOCK if old.get(k) is not None})
    new.setdefault("advanced", new["updated"])
    if float(new.get("percent") or 0) > float(old.get("percent") or 0):
        new["advanced"] = new["updated"]  # a percentage that rose: the training moves on
    return new


def latest(
    written: Mapping[str, Any] | None, taken: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The newer of the job's written report and the one last taken (which a write holds back
    up to its interval: an attempt ending now is judged by its last report, ``goodput``)."""
    if not taken or not written:
        return taken or written
    new, old = parse_time(taken.get("updated")), parse_time(written.get("updated"))
    return taken if new is not None and (old is None or new >= old) else written


def first_of_attempt(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether ``new`` is the first report of its attempt (after ``old``)."""
    return bool(new) and (not old or old.get("attempt") != new.get("attempt"))


def complete(progress: Mapping[str, Any]) -> bool:
    """Whether a report says the last step (``step == total``, once clamped)."""
    total = progress.get("total")
    return total is not None and progress.get("step") == total


def write_in(
    since_last: float, interval: float, progress: Mapping[str, Any], early_spent: bool
) -> float:
    """Seconds until a job's report may be written, ``since_last`` seconds after its last
    progress write: at most one write per ``interval``, but the first complete report of an
    attempt at once (``early_spent``: that attempt's went already)."""
    if complete(progress) and not early_spent:
        return 0.0
    return max(0.0, interval - since_last)


def duration(seconds: float) -> str:
    """A short human duration: 45s, 3m10s, 2h5m, 3d4h."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def age(progress: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds since the report was taken (None: no report)."""
    updated = parse_time(progress.get("updated"))
    return None if updated is None else (now - updated).total_seconds()


def stale(progress: Mapping[str, Any], phase: str | None, now: datetime) -> bool:
    """A running job whose last report is older than STALE_AFTER: its ETA no longer holds."""
    seconds = age(progress, now)
    return phase in ("Running", "Restarting") and seconds is not None and seconds > STALE_AFTER


def summary(progress: Mapping[str, Any] | None, phase: str | None, now: datetime) -> str:
    """One line: ``42.0% (step 420/1000)  eta 3m10s  loss=0.12`` and, if so, stale."""
    if not progress:
        return "no report"
    step, total = progress.get("step"), progress.get("total")
    parts = [
        f"{float(progress['percent']):.1f}% (step {step}/{total})" if total else f"step {step}"
    ]
    if progress.get("eta") and phase not in ("Succeeded", "Failed"):
        parts.append(f"eta {progress['eta']}")
    metrics = progress.get("metrics") or {}
    parts += [f"{k}={v:.4g}" for k, v in metrics.items()]
    seconds = age(progress, now)
    if stale(progress, phase, now) and seconds is not None:
        parts.append(f"STALE: last report {duration(seconds)} ago")
    return "  ".join(parts)


_REPORTED = ("progress", "checkpoint")  # what reports write (``progress_desk``)


def same_but_progress(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Two versions of a job that differ in status.progress and status.checkpoint at most (a
    report: nothing for the job's loop to do; a restart reads the checkpoint when it comes)."""

    def rest(body: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        status = {k: v for k, v in (body.get("status") or {}).items() if k not in _REPORTED}
        meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "resourceVersion"}
        return meta, body.get("spec"), status

    return rest(old) == rest(new)


def merge_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch of ``status.progress`` that leaves exactly ``new`` (what a report left
    out, an earlier metric or ETA, is removed)."""
    old = old or {}
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update(new)
    gone = {k: None for k in old.get("metrics") or {} if k not in new.get("metrics", {})}
    patch["metrics"] = {**gone, **(new.get("metrics") or {})}
    return patch
