"""A failed trainer's last words: its termination message (or log) read into the deciding
process's ranks, the one line that says what went wrong, its last meaningful lines, and the
collective that failed. Pure; the shapes of torch's output are ``torch_output``'s.

The message is what the kubelet kept: with ``FallbackToLogsOnError``, the log's last 2048 bytes
(80 lines) when the container wrote no message; else the file's last 4096 bytes, so a long
error JSON of torchrun's ``@record`` arrives cut at its head. Under torchrun the log ends with
its "Root Cause (first observed failure)" block (the failing process's global and local rank,
exit code and, where the script's main has ``@record``, its traceback); that block is trusted
over everything else in the tail, where other ranks' errors and torchrun's own traceback also
are. Without it, where the lines of several ranks show (by their prefixes), the deciding rank is
the first whose exception is not collateral, else the last with one.

The exception is a Python one (``ValueError: ...``) or an uncaught C++ one (``what():``);
a process killed by a signal with none in its output gets no summary made of its last line.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass

from .torch_output import (
    NO_COLLECTIVE,
    NOISE,
    Collective,
    Line,
    collateral,
    collective,
    split,
    thrown,
)
from .torch_output import what_goes_on as _what_goes_on

LIMIT = 1024  # characters of ``lines``
SUMMARY_LIMIT = 512
ROOT_CAUSE = "Root Cause (first observed failure):"

# An exception's line, as a traceback ends: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION = re.compile(
    r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Iteration)(?::.*)?$"
)
_LOCAL_RANK = re.compile(r"local_rank:\s*(\d+)")
_RANK = re.compile(r"^(\d+)")
_SIGNAL = re.compile(r"^Signal \d+ \((SIG\w+)\)")


@dataclass(frozen=True)
class LastWords:
    """What a failure's output says: the deciding process's local and global rank (where the
    output says), the line that names the error (``summary``), the last meaningful lines
    (``lines``), the failed collective, whether the error is another rank's echo, and whether
    the output holds the process's exception at all (else its log may: ``failure_logs``)."""

    local_rank: int | None
    summary: str
    lines: str
    rank: int | None = None
    collective: Collective = NO_COLLECTIVE
    collateral: bool = False
    exception: bool = False  # a Python exception or a C++ one's what() was found

    @property
    def block(self) -> str:
        """The deciding rank's block, as rules match it: its exception and its last lines."""
        return self.lines if self.summary in self.lines else f"{self.summary}\n{self.lines}"


def read(message: str | None, exit_code: int | None = None) -> LastWords:
    """Read a termination message (or log): torchrun's error JSON, a log tail with or without
    torchrun's Root Cause block, a plain traceback or log; an empty one says nothing.
    ``exit_code`` above 128 (a signal) with no exception in the output: no summary."""
    text = _error_json(message or "")
    lines = split((message or "") if text is None else text)
    start = max((i for i, line in enumerate(lines) if ROOT_CAUSE in line.text), default=-1)
    if start >= 0:
        return _root_cause(lines, start)
    return _story(_deciding(lines), signalled=exit_code is not None and exit_code > 128)[0]


def looks_collateral(message: str | None) -> bool:
    """Whether a failure looks like the consequence of another rank's (or the pod's) end: its
    error, the root cause's, says a peer went away or the process was terminated."""
    return read(message).collateral


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


def _root_cause(lines: list[Line], start: int) -> LastWords:
    """torchrun's Root Cause block: its rank line, exit code and traceback (or signal); without
    a traceback, the rank's own lines where the output still holds them."""
    block: list[str] = []
    for line in lines[start + 2 :]:  # past the header and "[0]:"
        if line.text.startswith("====="):
            break
        block += [] if re.match(r"\s*(time|host|error_file)\s*:", line.text) else [line.text]
    block = textwrap.dedent("\n".join(block)).splitlines()
    fields: dict[str, str] = {}
    for name, value in re.findall(r"^(\w+)\s*: (.*)$", "\n".join(block), re.MULTILINE):
        fields.setdefault(name, value)
    local = _LOCAL_RANK.search(fields.get("rank", ""))
    rank = int(found.group(1)) if (found := _RANK.match(fields.get("rank", ""))) else None
    local_rank = int(local.group(1)) if local else None
    if _exception(block) >= 0:
        words = _story([Line(line) for line in block], signalled=False)[0]
        return LastWords(
            local_rank,
            words.summary,
            words.lines,
            rank,
            collateral=words.collateral,
            exception=True,
        )
    owners = {rank, None if local_rank is None else f"local{local_rank}"} - {None}
    own = [line for line in lines[:start] if line.owner in owners]
    words, found = _story(own, signalled=False)
    fallback = _meaningful(block)
    shown = "\n".join(filter(None, (words.lines, *fallback)))
    if found:
        summary = words.summary
    elif signal := _SIGNAL.match(fields.get("traceback", "")):
        summary = f"killed by {signal.group(1)}, no exception in its output"
    else:
        code = fields.get("exitcode", "?").split(" ")[0]
        summary = f"exit code {code} (no traceback: no error file from @record)"
    return LastWords(
        local_rank,
        _cap(summary),
        _tail(shown.splitlines()),
        rank,
        words.collective,
        words.collateral or collateral(summary),
        found,
    )


def _story(lines: list[Line], signalled: bool) -> tuple[LastWords, bool]:
    """One process's lines read, and whether they hold an exception: its last (Python's or
    C++'s ``what():``), with the lines its message goes on over, else its last meaningful line
    (none if ``signalled``)."""
    texts = [line.text for line in lines]
    found = end = _exception(texts)
    at, cpp = thrown(texts)
    if at > found:
        found, end, summary = at, _what_goes_on(texts, at), cpp
        said = "\n".join([cpp, *texts[at + 1 : end + 1]])
    else:
        while found >= 0 and end + 1 < len(texts) and texts[end + 1].strip():
            end += 1  # its message goes on
        summary = texts[found].strip() if found >= 0 else ""
        said = "\n".join(texts[found : end + 1]) if found >= 0 else ""
    meaningful = _meaningful(texts[: end + 1] if found >= 0 else texts)
    if found < 0 and not signalled:
        summary = meaningful[-1].strip() if meaningful else ""
    local = next((m for text in texts if (m := _LOCAL_RANK.search(text))), None)
    local_rank = int(local.group(1)) if local else lines[found].local if found >= 0 else None
    ranks = [line.rank for line in lines if line.rank is not None]
    rank = lines[found].rank if found >= 0 and lines[found].rank is not None else None
    words = LastWords(
        local_rank,
        _cap(summary),
        _tail(meaningful),
        rank if rank is not None else (ranks[-1] if ranks and len(set(ranks)) == 1 else None),
        collective(texts),
        collateral(said or summary),
        found >= 0,
    )
    return words, found >= 0


def _deciding(lines: list[Line]) -> list[Line]:
    """The deciding process's lines where several ranks' show (else all): the first whose
    exception is not collateral, else the last with an exception."""
    owners = list(dict.fromkeys(line.owner for line in lines if line.owner is not None))
    if len(owners) < 2:
        return lines
    stories = [(o, _story([x for x in lines if x.owner == o], False)) for o in owners]
    found = [(o, words) for o, (words, has) in stories if has]
    cause = next((o for o, w in found if not w.collateral), found[-1][0] if found else None)
    return [line for line in lines if line.owner == cause] if cause is not None else lines


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


def _meaningful(lines: list[str]) -> list[str]:
    return [line for line in lines if not NOISE.search(line)]


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
