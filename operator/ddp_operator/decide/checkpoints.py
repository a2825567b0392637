"""The job's last checkpoint, as its script said it (``ddp_operator.progress.checkpoint``): checked
out of a report into ``status.checkpoint``, kept across restarts, and handed to each later
attempt as where to resume (``DDP_RESUME_STEP``, ``DDP_RESUME_PATH``). Pure.

A report carries the last checkpoint its process said (every report after it, so none is lost
to the rate limit); the job's changes only when the step or the path does, and then the write
goes within CHECKPOINT_GAP seconds rather than the progress interval: a failure soon after a
save must find the checkpoint on the job when the group restarts. A checkpoint may go back (a
script that fell back to an older one says so): the job shows what the script says.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..model import constants as c
from .conditions import format_time, parse_time
from .progress_report import MAX_STEP, BadReport

MAX_PATH = 1024  # characters of a checkpoint's path
CHECKPOINT_GAP = 1.0  # seconds between two writes of a job's progress, where a checkpoint moved


def of_report(payload: Mapping[str, Any], attempt: int, now: datetime) -> dict[str, Any] | None:
    """``status.checkpoint`` from a report (None: it names none), or BadReport naming the field.
    ``attempt``: the attempt the report is taken in."""
    raw = payload.get("checkpoint")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise BadReport("checkpoint must be an object with a step (and a path)")
    step = raw.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise BadReport(f"checkpoint.step must be an integer from 0 to {MAX_STEP}, not {step!r}")
    path = raw.get("path")
    if path is not None and (
        not isinstance(path, str)
        or not path
        or len(path) > MAX_PATH
        or any(ord(ch) < 32 or ord(ch) == 127 for ch in path)
    ):
        raise BadReport(
            f"checkpoint.path must be 1 to {MAX_PATH} printable characters, not {path!r:.80}"
        )
    out: dict[str, Any] = {"step": step, "attempt": attempt, "time": format_time(now)}
    if path:
        out["path"] = path
    return out


def moved(known: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether ``new`` (a report's) says another checkpoint than the job's ``known``."""
    if not new:
        return False
    return not known or (known.get("step"), known.get("path")) != (new["step"], new.get("path"))


def latest(
    written: Mapping[str, Any] | None, taken: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The newer of the job's written checkpoint and the one last taken (its write may be up to
    CHECKPOINT_GAP behind: a group restarting now resumes from the newest)."""
    if not taken or not written:
        return taken or written
    new, old = parse_time(taken.get("time")), parse_time(written.get("time"))
    return taken if new is not None and (old is None or new >= old) else written


def merge_patch(new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that leaves exactly ``new`` in ``status.checkpoint`` (a path said before
    and not now goes)."""
    return {"path": None, **new}


def resume_data(checkpoint: Mapping[str, Any] | None) -> dict[str, str]:
    """What the job's ConfigMap says to resume from (``job_configmap``): nothing before the
    first checkpoint; then its step, and its path ('' where the script gave none)."""
    if not checkpoint or not isinstance(checkpoint.get("step"), int):
        return {}
    return {
        c.ENV_RESUME_STEP: str(checkpoint["step"]),
        c.ENV_RESUME_PATH: str(checkpoint.get("path") or ""),
    }
