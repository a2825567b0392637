"""What `kubectl ddp status` shows: a job and its workers, as text. Pure: dicts in, text out."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..decide import goodput, kubelet_events, presence
from ..decide.conditions import parse_time
from ..decide.progress_report import summary
from ..model import constants as c
from ..model.pod_status import STARTING
from ..model.workers import observe


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """Kubernetes-style age: 42s, 7m, 3h, 2d."""
    start = parse_time(timestamp)
    if start is None:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - start).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _waiting_reason(pod: Mapping[str, Any]) -> str | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return None


# The conditions `kubectl ddp status` shows, in the status that needs the user's attention.
NOTABLE = {
    c.COND_UNSCHEDULABLE: "True",
    c.COND_NOT_STARTING: "True",
    c.COND_BLOCKED: "True",
    c.COND_FAILED: "True",
    c.COND_RESTARTING: "True",
    c.COND_GANG: "False",
    c.COND_QUEUED: "True",
    c.COND_NODES_EXCLUDED: "True",
}


def _restarts(status: Mapping[str, Any]) -> str:
    """All group restarts, and of them those not counted against backoffLimit, if any."""
    text = str(status.get("restarts", 0))
    if status.get("uncountedRestarts"):
        text += f" ({status['uncountedRestarts']} not counted)"
    return text


def _excluded(status: Mapping[str, Any]) -> list[str]:
    """The nodes the job keeps out (``status.excludedNodes``), one line each."""
    entries = status.get("excludedNodes") or []
    if not entries:
        return []
    lines = [f"  excluded nodes ({len(entries)}):"]
    for e in entries:
        lines.append(
            f"    {e.get('node')}: {e.get('reason')} (attempt {e.get('attempt')}, "
            f"{e.get('time')}): {e.get('evidence', '')}"
        )
    return lines


def _first_failure(status: Mapping[str, Any]) -> list[str]:
    """The failure that decided the last restart or the end: who, how, and its last lines."""
    first = status.get("firstFailure") or {}
    if not first:
        return []
    who = f"worker {first['worker']}" if "worker" in first else "the group"
    if "localRank" in first:
        who += f" (local rank {first['localRank']})"
    how = f"exit code {first['exitCode']}" if "exitCode" in first else ""
    how = ", ".join(filter(None, (how, first.get("signal"), first.get("reason"))))
    head = f"  first failure (attempt {first.get('attempt', 0)}): {who}: {how}"
    head += f"; {first['collateral']} more failed after it" if first.get("collateral") else ""
    head += f"; {first.get('action')} ({first.get('rule')})"
    head += "; read from its log" if first.get("source") == "Log" else ""
    if "stepsLost" in first:
        head += f"; at step {first['lastStep']}, {first['stepsLost']} steps lost"
    if "firstStepSeconds" in first:
        head += f"; training again {first['firstStepSeconds']}s after it"
    tail = [f"    | {line}" for line in (first.get("message") or "").splitlines()[-10:]]
    unread = (
        [f"    (its log could not be read: {first['logError']})"] if "logError" in first else []
    )
    return [head, *tail, *unread]


def _goodput(status: Mapping[str, Any], now: datetime) -> list[str]:
    """The job's last checkpoint and what its failures cost, where it has either."""
    lines = []
    if mark := status.get("checkpoint"):
        where = f" at {mark['path']}" if mark.get("path") else ""
        when = age(mark.get("time"), now)
        lines.append(
            f"  checkpoint: step {mark.get('step')}{where} ({when} ago, attempt "
            f"{mark.get('attempt', 0)}): restarts resume there"
        )
    if ledger := status.get("goodput"):
        failures = ledger.get("failures", 0)
        line = "  goodput: no failures"
        if failures:
            line = f"  goodput: {failures} failures cost {ledger.get('stepsLost', 0)} steps"
            line += f" and {ledger.get('lostSeconds', 0)}s"
        live = goodput.ratio(status, status.get("progress"), now)
        if (share := ledger.get("ratio", live)) is not None:
            line += f"; effective training time {100 * share:.1f}%"
        if run := ledger.get("restartsWithoutProgress"):
            steps = ", ".join(map(str, ledger.get("diedAt") or []))
            line += f"; {run} restarts in a row without progress (ended at steps {steps})"
        lines.append(line)
    return lines


FAKE = " (fake)"
FAKE_NOTE = (
    "(fake): a kwok node, simulated: its workers run no containers (no training, no logs), "
    "their states are kwok's"
)


def render_status(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: datetime | None = None,
    events: Sequence[Mapping[str, Any]] = (),
    fake_nodes: Collection[str] = (),
    window: float = presence.WINDOW_S,
) -> str:
    """One line for the job, its notable conditions, then one line per worker; a worker not
    started yet gets the reason of its latest Warning Event (``events``) if it has one, and one
    on a kwok node (``fake_nodes``: a local or test cluster's simulated ones) is marked, with a
    line under the table saying what that means. A job no operator has spoken to ``window``
    seconds after its creation says so under its first line."""
    now = now or datetime.now(UTC)
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    nodes = int(spec.get("nodes", 1))
    lines = [
        f"ddpjob/{meta['name']}  phase={status.get('phase', 'Pending')}  nodes={nodes}  "
        f"restarts={_restarts(status)}  age={age(meta.get('creationTimestamp'), now)}"
    ]
    if spec.get("minNodes") is not None and spec.get("maxNodes") is not None:
        lines[0] += (  # elastic: the live world size, and the workers replaced alone
            f"  world={status.get('worldSize', 0)}  replacements={status.get('replacements', 0)}"
        )
    if unheard := presence.unheard(job, now, window):
        lines.append(f"  {unheard}")
    if status.get("progress"):
        phase = status.get("phase")
        lines.append(f"  progress: {summary(status['progress'], phase, now)}")
    lines += _goodput(status, now)
    for cond in status.get("conditions") or []:
        if cond.get("status") == NOTABLE.get(cond["type"]):
            lines.append(f"  {cond['type']}: {cond.get('message', '')}")
    lines += _first_failure(status)
    lines += _excluded(status)
    rows = [("WORKER", "POD", "PHASE", "NODE", "RESTARTS", "EXIT", "REASON")]
    by_index = {}
    for pod in pods:
        w = observe(pod)
        if w is not None and not (
            w.index in by_index and by_index[w.index][0].attempt_now > w.attempt_now
        ):
            by_index[w.index] = (w, pod)
    said = kubelet_events.latest(events, (w.uid for w, _ in by_index.values() if w.uid))
    for i in range(nodes):
        if i not in by_index:
            rows.append((str(i), "-", "NotCreated", "-", "-", "-", "-"))
            continue
        w, pod = by_index[i]
        phase = "Terminating" if w.deleting else w.phase
        waiting = _waiting_reason(pod)
        if w.phase == "Pending" and w.uid in said and (waiting or "").startswith(STARTING):
            waiting = f"{said[w.uid].reason}: {said[w.uid].message}".rstrip(": ")
        reason = w.unschedulable or waiting or w.reason or "-"
        exit_code = "-" if w.exit_code is None else str(w.exit_code)
        node = (w.node or "-") + (FAKE if w.node in fake_nodes else "")
        rows.append((str(i), w.name, phase, node, str(w.attempt_now), exit_code, reason))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    if any(row[3].endswith(FAKE) for row in rows[1:]):
        lines.append(FAKE_NOTE)
    return "\n".join(lines)
