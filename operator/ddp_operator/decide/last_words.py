"""A failed trainer's last words: its termination message read into the failing process's local
rank, the one line that says what went wrong, and the last meaningful lines. Pure.

The message is what the kubelet kept: with ``FallbackToLogsOnError``, the log's last 2048 bytes
(80 lines) when the container wrote no message; else the file's last 4096 bytes, so a long
error JSON of torchrun's ``@record`` arrives cut at its head. Under torchrun the log ends with
its "Root Cause (first observed failure)" block (the failing process's local rank, exit code
and, where the script's main has ``@record``, its traceback); that block is trusted over
everything else in the tail, where other ranks' errors and torchrun's own traceback also are.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass

LIMIT = 1024  # characters of ``lines``
SUMMARY_LIMIT = 512
ROOT_CAUSE = "Root Cause (first observed failure):"

# An exception's line, as a traceback ends: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION = re.compile(
    r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Iteration)(?::.*)?$"
)
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")  # torch prefixes a rank's uncaught traceback
_LOCAL_RANK = re.compile(r"local_rank:\s*(\d+)")
_BOILERPLATE = re.compile(
    r"^\s*$|^[=*-]{5,}$|^\s*[\^~]+\s*$|To enable traceback see|Setting OMP_NUM_THREADS"
    r"|^[IWEF]\d{4} [\d:.]+ +\d+ \S+\] ?[=*-]*\s*$"  # torchrun's banner, logged empty
)
# What a rank prints when another rank (or the pod) went first: gloo's and the store's lost
# connections (seen in real pods: "Connection closed by peer ... caused by a remote worker
# crashing", a store "timed out ... while trying to connect to"), NCCL's remote errors and
# aborts, a collective's timeout, torchrun's agent or a worker terminated (SIGTERM).
_COLLATERAL = re.compile(
    r"closed by (?:remote )?peer|reset by peer|broken pipe|connection refused|remote worker"
    r"|remote process exit|ncclRemoteError|communicator was aborted|collective operation timeout"
    r"|DistNetworkError|trying to connect to|Connection was likely closed|RendezvousClosedError"
    r"|Signal 15 \(SIGTERM\)|got signal: 15|Received 15 death signal",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class LastWords:
    """What a failure's message says: the failing process's local rank (where torchrun says),
    the line that names the error (``summary``) and the last meaningful lines (``lines``)."""

    local_rank: int | None
    summary: str
    lines: str


def read(message: str | None) -> LastWords:
    """Read a termination message: torchrun's error JSON, a log tail with or without torchrun's
    Root Cause block, a plain traceback or log; an empty one says nothing."""
    text = _error_json(message or "")
    text = (message or "") if text is None else text
    ranked = [_unprefix(line.rstrip()) for line in text.splitlines()]
    lines = [line for _, line in ranked]
    start = max((i for i, line in enumerate(lines) if ROOT_CAUSE in line), default=-1)
    if start >= 0:
        return _root_cause(ranked, start)
    found = end = _exception(lines)
    while found >= 0 and end + 1 < len(lines) and lines[end + 1].strip():  # its message goes on
        end += 1
    meaningful = _meaningful(lines[: end + 1] if found >= 0 else lines)
    summary = lines[found].strip() if found >= 0 else (meaningful[-1].strip() if meaningful else "")
    rank = next((m for line in lines if (m := _LOCAL_RANK.search(line))), None)
    return LastWords(int(rank.group(1)) if rank else None, _cap(summary), _tail(meaningful))


def looks_collateral(message: str | None) -> bool:
    """Whether a failure looks like the consequence of another rank's (or the pod's) end: its
    summary, the root cause's error, says a peer went away or the process was terminated."""
    return says_collateral(read(message).summary)


def says_collateral(summary: str) -> bool:
    """Whether a summary (``LastWords.summary``) says a peer went away or the process was
    terminated."""
    return bool(_COLLATERAL.search(summary))


def _error_json(text: str) -> str | None:
    """The error of torchrun's error JSON (``{"message": {"message", "extraInfo":
    {"py_callstack", "timestamp"}}}`` or ``{"message": str}``), its head possibly cut."""
    stripped = text.strip()
    if not stripped.endswith("}"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        cut = stripped.rfind('", "timestamp": "')
        if cut < 0:
            return None
        head = stripped[:cut]
        if (at := head.rfind('"py_callstack": "')) >= 0:
            head = head[at + len('"py_callstack": "') :]
        for skip in range(3):  # the cut may have split an escape
            try:
                return json.loads(f'"{head[skip:]}"')
            except ValueError:
                pass
        return head
    error = data.get("message") if isinstance(data, dict) else None
    if isinstance(error, str):
        return error
    if not isinstance(error, dict):
        return None
    stack = (error.get("extraInfo") or {}).get("py_callstack")
    return stack if isinstance(stack, str) and stack.strip() else str(error.get("message", ""))


def _root_cause(ranked: list[tuple[int | None, str]], start: int) -> LastWords:
    """torchrun's Root Cause block: its rank line, exit code and traceback (or signal)."""
    block: list[str] = []
    for _, line in ranked[start + 2 :]:  # past the header and "[0]:"
        if line.startswith("====="):
            break
        block += [] if re.match(r"\s*(time|host|error_file)\s*:", line) else [line]
    block = textwrap.dedent("\n".join(block)).splitlines()
    fields: dict[str, str] = {}
    for name, value in re.findall(r"^(\w+)\s*: (.*)$", "\n".join(block), re.MULTILINE):
        fields.setdefault(name, value)
    local = _LOCAL_RANK.search(fields.get("rank", ""))
    found = _exception(block)
    if found >= 0:
        summary = block[found].strip()
    elif (trace := fields.get("traceback", "")).startswith("Signal"):
        summary = trace.strip()
    else:  # no error file: the rank's own "[rankN]: ..." lines, where the tail still holds them
        rank = fields.get("rank", "").split(" ")[0]
        own = [line for r, line in ranked[:start] if str(r) == rank]
        at = _exception(own)
        code = fields.get("exitcode", "?").split(" ")[0]
        none = f"exit code {code} (no traceback: no error file from @record)"
        summary = own[at].strip() if at >= 0 else none
    rank = int(local.group(1)) if local else None
    return LastWords(rank, _cap(summary), _tail(_meaningful(block)))


def _exception(lines: list[str]) -> int:
    """The index of the last exception line, torchrun's own failures (``ChildFailedError``, and
    the error it hits copying the root cause's error file) left out; -1 if none."""
    found, noise = -1, False
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" in line:
            noise = False
        noise = noise or "in dump_error_file" in line
        if _EXCEPTION.match(line) and not noise and "ChildFailedError" not in line:
            found = i
    return found


def _unprefix(line: str) -> tuple[int | None, str]:
    match = _RANK_PREFIX.match(line)
    return (int(match.group(1)), line[match.end() :]) if match else (None, line)


def _meaningful(lines: list[str]) -> list[str]:
    return [line for line in lines if not _BOILERPLATE.search(line)]


def _tail(lines: list[str]) -> str:
    """The last whole lines within ``LIMIT`` characters (a longer last line: its head)."""
    kept, size = [], -1
    for line in reversed(lines):
        size += len(line) + 1
        if size > LIMIT:
            break
        kept.append(line)
    return "\n".join(reversed(kept)) if kept or not lines else _cap(lines[-1], LIMIT)


def _cap(text: str, limit: int = SUMMARY_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
