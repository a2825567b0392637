"""The shapes of torch's, torchrun's and NCCL's output that ``last_words`` reads: line prefixes
and whose lines they are, noise, C++ exceptions (``what():``), collectives and the script's line
of a failed one, and the errors a rank prints when another went first. Pure; every pattern
here takes time linear in a line (the output is the tenant's).

Shapes (REFERENCE.md sections 10 and 11): torch prefixes a rank's uncaught traceback and its C++
log lines with ``[rankN]:``; ``torchrun --tee 3`` each child's line with ``[defaultN]:`` (the
role and the local rank) before that; an uncaught C++ exception prints ``terminate called after
throwing an instance of 'c10::DistBackendError'`` then ``  what():  <message>`` (its message may
go on over several lines), then ``Exception raised from ...`` and ``frame #N:`` lines; NCCL's
watchdog names the collective (``WorkNCCL(SeqNum=2, OpType=ALLREDUCE, ...)``) and the rank
(``[Rank 1]``), and torch prints ``Stack trace of the failed collective:`` with ``#N <function>
from <file>:<line>`` frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "[default1]:[rank1]:", "[default1]:", "[rank1]:" (never "[W1127 ...]", a log line's header).
_PREFIX = re.compile(r"^(?:\[(?!rank\d)[A-Za-z_][\w-]{0,62}?(\d{1,9})\]:)?(?:\[rank(\d+)\]:)?")
# NCCL's "[Rank 1]", "[PG ID 0 ... Rank 1]".
_NAMED_RANK = re.compile(r"\[(?:[^\][]*\s)?Rank (\d+)\]")
_THROWN = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(.*)$")
_WRAPPERS = re.compile(  # what NCCL's watchdog puts around the error it caught
    r"^(?:\s*\[[^\]]*\]\s*)*(?:Process group watchdog thread terminated with exception:\s*)?"
    r"(?:\[[^\]]*\]\s*)*"
)
_WORK = re.compile(r"Work\w*\(SeqNum=(\d+), OpType=([A-Z_]+)")
_STACK = "Stack trace of the failed collective:"
_FRAME = re.compile(r"\s*#\d+\s")  # "#2 <module> from train.py:5"
_AT = re.compile(r"\S.*:\d+")
_LIBRARY = re.compile(r"/(?:site|dist)-packages/|/torch/|^<")
# Lines that say nothing of the failure: C++ frames and their header, the terminate line,
# warnings (torch's "[W... file.cpp:N]" log lines, Python's warnings and their source line).
NOISE = re.compile(
    r"^\s*frame #\d+:|^\s*Exception raised from |terminate called |^\[[WI]\d{4} [\d:.]+"
    r"|destroy_process_group\(\) was not called|Warning: |^\s*warnings\.warn\("
    r"|^\s*$|^[=*-]{5,}$|^\s*[\^~]+\s*$|To enable traceback see|Setting OMP_NUM_THREADS"
    r"|^[IW]\d{4} [\d:.]+ +\d+ \S+\]"  # torchrun's own log lines, but its errors
    r"|^[IWEF]\d{4} [\d:.]+ +\d+ \S+\] ?[=*-]*\s*$"  # torchrun's banner, logged empty
)
# What a rank prints when another rank (or the pod) went first: gloo's and the store's lost
# connections (seen in real pods: "Connection closed by peer ... caused by a remote worker
# crashing", a store "timed out ... while trying to connect to"), gloo's timeouts waiting on a
# peer, NCCL's remote errors and aborts, a collective's timeout, torchrun's agent or a worker
# terminated (SIGTERM).
COLLATERAL = re.compile(
    r"closed by (?:remote )?peer|reset by peer|broken pipe|connection refused|remote worker"
    r"|remote process exit|ncclRemoteError|communicator was aborted|collective operation timeout"
    r"|DistNetworkError|trying to connect to|Connection was likely closed|RendezvousClosedError"
    r"|Timed out waiting \d+ms for (?:recv|send) operation|Application timeout caused pair closure"
    r"|Signal 15 \(SIGTERM\)|got signal: 15|Received 15 death signal",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Line:
    """One line of output, its prefixes taken off: whose it is, where they say."""

    text: str
    rank: int | None = None  # the global rank ("[rankN]:", or NCCL's "[Rank N]" in it)
    local: int | None = None  # the local rank ("[defaultN]:")

    @property
    def owner(self) -> int | str | None:
        """Whose line it is: its global rank, else its local rank's name, else no one's."""
        if self.rank is not None:
            return self.rank
        return None if self.local is None else f"local{self.local}"


@dataclass(frozen=True)
class Collective:
    """The failed collective, where NCCL named it, and the script's line that called it."""

    op: str | None = None  # e.g. ALLREDUCE
    seq: int | None = None  # its SeqNum
    line: str | None = None  # e.g. train.py:5


NO_COLLECTIVE = Collective()


def split(text: str) -> list[Line]:
    """Every line of ``text``, unprefixed, with whose it is: its prefixes, NCCL's ``[Rank N]``
    in it, a local rank's global one (where a line shows both), or, for an unprefixed line that
    goes on the one before (indented, a ``#N`` frame), that line's."""
    lines: list[Line] = []
    ranks: dict[int, int] = {}  # local -> global
    for raw in text.splitlines():
        match = _PREFIX.match(raw.rstrip())
        local, rank = (int(g) if g else None for g in match.groups()) if match else (None, None)
        rest = raw.rstrip()[match.end() :] if match else raw.rstrip()
        rest = rest[1:] if match and match.end() and rest.startswith(" ") else rest
        if rank is None and (named := _NAMED_RANK.search(rest)):
            rank = int(named.group(1))
        if local is not None and rank is not None:
            ranks[local] = rank
        if local is None and rank is None and lines and re.match(r"\s+\S|#\d", rest):
            local, rank = lines[-1].local, lines[-1].rank
        lines.append(Line(rest, rank, local))
    lines = [Line(x.text, ranks.get(x.local), x.local) if x.rank is None else x for x in lines]
    for i, line in enumerate(lines[:-1]):  # "terminate called": the next line's "what():"'s
        if line.owner is None and _THROWN.search(line.text) and _WHAT.match(lines[i + 1].text):
            lines[i] = Line(line.text, lines[i + 1].rank, lines[i + 1].local)
    return lines


def thrown(lines: list[str]) -> tuple[int, str]:
    """The last uncaught C++ exception: the index of its ``what():`` line and the exception
    (its type and message, NCCL's wrappers taken off); (-1, "") if none."""
    found, kind = (-1, ""), ""
    for i, line in enumerate(lines):
        if match := _THROWN.search(line):
            kind = match.group(1)
        elif what := _WHAT.match(line):
            message = _WRAPPERS.sub("", what.group(1)).strip()
            found, kind = (i, ": ".join(filter(None, (kind, message)))), ""
    return found


def what_goes_on(lines: list[str], at: int) -> int:
    """The last line of a ``what():`` message at ``at`` (it ends where the noise begins)."""
    end = at
    while end + 1 < len(lines) and lines[end + 1].strip() and not NOISE.search(lines[end + 1]):
        end += 1
    return end


def collective(lines: list[str]) -> Collective:
    """The failed collective (the last one NCCL named) and the first frame of the script
    (not a library's) in torch's last stack trace of the failed collective."""
    op = seq = where = None
    for i, line in enumerate(lines):
        if work := _WORK.search(line):
            seq, op = int(work.group(1)), work.group(2)
        if _STACK in line:
            files = []
            for frame in lines[i + 1 :]:
                at = frame.rpartition(" from ")[2].strip()
                if not _FRAME.match(frame) or " from " not in frame or not _AT.fullmatch(at):
                    break
                files += [] if _LIBRARY.search(at) else [at]
            where = files[0] if files else where
    return Collective(op, seq, where)


def collateral(text: str) -> bool:
    """Whether an error says a peer went away or the process was terminated."""
    return bool(COLLATERAL.search(text))
