"""What `kubectl ddp top` shows: one line per job, with its training's progress as a bar. Pure:
dicts in, text out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..decide import presence
from ..decide.progress_report import stale
from .jobview import age

BAR = 20  # characters of the progress bar


def bar(percent: float | None) -> str:
    """``[#######-------------]  35.0%``; blank when the job has not said its total."""
    if percent is None:
        return " " * (BAR + 2 + 8)
    filled = round(BAR * min(max(percent, 0.0), 100.0) / 100)
    return f"[{'#' * filled}{'-' * (BAR - filled)}] {percent:5.1f}%"


def row(job: Mapping[str, Any], now: datetime, namespaced: bool) -> list[str]:
    """The cells of one job."""
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    phase = status.get("phase") or "Pending"
    p = status.get("progress") or {}
    running = (status.get("workers") or {}).get("running", 0)
    eta = p.get("eta") if phase in ("Running", "Restarting") else None
    if p and stale(p, phase, now):
        eta = f"stale {age(p.get('updated'), now)}"
    speed = (p.get("metrics") or {}).get("samples_per_s")
    cells = [] if namespaced else [meta.get("namespace", "")]
    return [
        *cells,
        meta["name"],
        phase,
        f"{running}/{spec.get('nodes', 1)}",
        bar(p.get("percent")) if p else "-",
        f"{p['step']}/{p.get('total', '?')}" if p else "-",
        eta or "-",
        f"{speed:,.0f}" if isinstance(speed, int | float) else "-",
        age(meta.get("creationTimestamp"), now),
    ]


def render_top(
    jobs: Sequence[Mapping[str, Any]],
    now: datetime,
    namespaced: bool = True,
    window: float = presence.WINDOW_S,
) -> str:
    """The table of jobs, by namespace and name; under it, one line for each job that no
    operator has spoken to ``window`` seconds after its creation."""
    head = ["NAME", "PHASE", "WORKERS", "PROGRESS", "STEP", "ETA", "SAMPLES/S", "AGE"]
    rows = [head if namespaced else ["NAMESPACE", *head]]
    key = lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"])  # noqa: E731
    ordered = sorted(jobs, key=key)
    rows += [row(j, now, namespaced) for j in ordered]
    if len(rows) == 1:
        return "no DDPJobs"
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    table = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    notes = [line for j in ordered if (line := presence.unheard(j, now, window))]
    return "\n".join([*table, *notes])
