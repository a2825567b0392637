"""The whole story when the tail is not enough: when a failure's termination message does not
hold its exception, its worker's log is read, once per pod and failed attempt (``act``'s
``failure_logs``), and its words (summary, ``message``, the block rules match) come from there.
Pure: whether the log is wanted, how to ask for it, and how its text is read.

Which logs (``failure_facts.to_read``): where the first failure's words are not sure, every
failed pod's that may hold the cause, read together before the failures are ordered for good:
under torchrun without ``@record`` neither the cause's message nor its echo's holds an
exception, and only their logs tell which said a peer went away. At most ``MAX_READS`` of them
per pass, each bounded in bytes (``LIMIT_BYTES``) and time (``TIMEOUT_SECONDS``, all at once).

The termination message is the log's last 2048 bytes (``FallbackToLogsOnError``). Under
torchrun without ``@record`` the rank's exception sits further up (torch 2.11, Python 3.12:
~2.2 KB before the end, behind torchrun's own traceback and Root Cause block); torch prints
an NCCL timeout's ``Stack trace of the failed collective`` ~7.5 KB before the end; a C++ abort
may leave only frames in the tail. So the log is wanted when the message's words hold no
exception (Python's or a C++ one's ``what():``), the "no traceback" and signal cases included,
and the message fills the kubelet's tail (a shorter one is the whole log: nothing to read).

How it is asked (``PodLogOptions``): ``limitBytes`` alone keeps the log's *first* bytes, the
wrong end; ``tailLines`` alone is unbounded in bytes. Both together give the first
``LIMIT_BYTES`` of the last ``TAIL_LINES`` lines: the log's end whole when those lines fit
(average lines up to 262 bytes), the read bounded either way. An answer cut at the limit lacks
the log's end; the termination message, which is that end, is read after it. ``container`` is
the container that ended (the trainer), ``previous`` where it has started again since (its
status's ``lastState``, not ``state``, holds the run that ended); no ``timestamps``, nor
``sinceTime`` (a long training's first lines are not wanted).

Words read from the log replace the message's only if they hold an exception: a log that says
no more (an OOM kill after plain output) leaves the failure as its message named it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .failures import Failure
from .last_words import LastWords, read

MESSAGE_BYTES, MESSAGE_LINES = 2048, 80  # FallbackToLogsOnError's tail: whichever is less
TAIL_LINES = 500
LIMIT_BYTES = 128 * 1024
TIMEOUT_SECONDS = 5.0  # a read never holds a restart up longer (the reads run at once)
MAX_READS = 8  # logs read for one pass's failures at most: the earliest failures' first
MESSAGE = "TerminationMessage"  # firstFailure.source: where its words came from
LOG = "Log"
GAP = "[... the rest of the log: its last 2048 bytes, the termination message ...]"


@dataclass(frozen=True)
class LogAsk:
    """Which log to read for a failure: the pod (its UID), the container that ended, whether
    its run that ended is the previous one, the attempt, and what the message already says."""

    pod: str
    uid: str
    container: str | None
    previous: bool
    attempt: int
    message: str
    exit_code: int | None


@dataclass(frozen=True)
class LogRead:
    """What came of reading a failure's log, once per attempt: the words read from it (None:
    not read), the bytes read, or why it could not be read."""

    uid: str
    attempt: int
    words: LastWords | None = None
    size: int = 0
    error: str = ""
    at: str | None = None  # when it was read (RFC 3339, the operator's clock)

    @property
    def key(self) -> tuple[str, int]:
        return (self.uid, self.attempt)


def cut(message: str) -> bool:
    """Whether a termination message may be a longer log's end: it fills the kubelet's tail
    (MESSAGE_BYTES, or MESSAGE_LINES lines). A shorter one holds the whole log already; an
    empty one may come from a template's ``File`` policy, its log unread."""
    size = len(message.encode())
    return not message or size > MESSAGE_BYTES - 64 or message.count("\n") >= MESSAGE_LINES - 1


def needed(words: LastWords, exit_code: int | None, message: str) -> bool:
    """Whether a container's failure wants its log read: it exited non-zero, its message's
    words hold no exception, and the message may not be its whole log (``cut``)."""
    return exit_code not in (None, 0) and not words.exception and cut(message)


def words_of(ask: LogAsk, text: str, capped: bool) -> LastWords:
    """The words of a log read for ``ask`` (``capped``: the answer reached ``LIMIT_BYTES``, its
    end missing: the termination message goes after its last whole line)."""
    if capped:
        whole = text[: text.rfind("\n") + 1]
        text = f"{whole}{GAP}\n{ask.message}"
    return read(text, ask.exit_code)


def chosen(told: LastWords, log: LogRead | None) -> tuple[LastWords, str]:
    """The failure's words and where they came from: the log's where they hold an exception,
    else the termination message's."""
    if log is not None and log.words is not None and log.words.exception:
        return log.words, LOG
    return told, MESSAGE


def unreadable(failure: Failure) -> str:
    """Why a log could not be read, from the classified error: a Forbidden names the missing
    permission (the chart's Role grants it)."""
    if failure.reason == "Forbidden":
        return (
            f"Forbidden: the operator may not get pods/log here (the chart's Role grants it: "
            f"docs/operations/rbac.md): {failure.message}"
        )
    return f"{failure.reason}: {failure.message}"


def said(ask: LogAsk, log: LogRead) -> tuple[bool, str, str]:
    """The Event a read posts on its job: (warning, reason, message)."""
    run = ", its previous run" if ask.previous else ""
    where = f"pod {ask.pod}'s log (container {ask.container}{run})"
    if log.error:
        why = f"could not read {where}: {log.error}; named from its termination message"
        return True, "FailureLogUnreadable", why
    words, source = chosen(LastWords(None, "", ""), log)
    found = f"its words come from there: {words.summary}" if source == LOG else ""
    found = found or "no exception in it either; named from its termination message"
    return False, "FailureLogRead", f"read the last {log.size} bytes of {where}: {found}"
