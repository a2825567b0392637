"""``onMessagePattern``: a tenant's regular expression, checked once, compiled when a failure is
matched, each within a bound of memory. Pure.

RE2 (``google-re2``, the dialect the API server checks the patterns in) matches in time linear in
the text, so no pattern can stall the operator (Python's ``re`` backtracks: ``(a+)+b`` runs for
days on 40 characters). What a compiled pattern holds is bounded by RE2's ``max_mem`` only (8 MiB
by default: its program and its DFAs' caches), and ``re2.compile`` keeps the last 128 patterns it
compiled alive, process-wide. Resolving a job (every pass, every stack report) must not compile its
patterns again, and no number of jobs may make what they hold add up. So:

- every pattern is compiled with at most ``MAX_MEMORY``: one that needs more is the job's error,
  naming its field (``problem``), never the operator's;
- ``problem`` compiles a pattern once per distinct text and keeps only its verdict (the last
  ``CHECKED`` texts): a job's patterns cost their compilation once, whatever its passes;
- a failure is matched (``MessagePattern.search``) by the pattern compiled again from its text,
  kept among the last ``KEPT`` compiled (one job's rules fit): what compiled patterns hold is
  bounded by ``KEPT`` patterns of ``MAX_MEMORY`` each, whatever the jobs and their patterns.

Both caches are keyed by the pattern's text, not by job and generation: they stay bounded however
many jobs run, need nothing when a job goes, and the rules every team copies are one entry.
``re2.compile``'s own cache is emptied (``re2.purge``) after each compilation, so that it keeps
none of them alive beside these (the operator compiles nothing else with RE2)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import re2

MAX_MEMORY = 1 << 20  # RE2's max_mem for one pattern; a pattern needing more is refused
CHECKED = 4096  # verdicts kept, by text (at most 1,024 characters each: the CRD's bound)
KEPT = 20  # compiled patterns kept for matching: one job's rules (the CRD allows 20)

_TOO_LARGE = "pattern too large - compile failed"  # RE2's words for ErrorPatternTooLarge

_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_MEMORY
_OPTIONS.log_errors = False  # a bad pattern is the job's error, not the operator's log's


def _compile(pattern: str) -> Any:
    """``pattern`` compiled within ``MAX_MEMORY``, not kept by ``re2.compile``'s cache."""
    try:
        return re2.compile(pattern, _OPTIONS)
    finally:
        re2.purge()


@functools.lru_cache(maxsize=CHECKED)
def problem(pattern: str) -> str:
    """Why ``pattern`` cannot be a rule's (RE2's words, or the memory bound), or ``""``."""
    try:
        _compile(pattern)
    except re2.error as exc:
        words = exc.args[0] if exc.args else exc
        said = words.decode() if isinstance(words, bytes) else str(words)
        if said == _TOO_LARGE:
            return (
                f"is too large: RE2 would need more than {MAX_MEMORY >> 20} MiB to compile it, the "
                "bound of one pattern (a repeat of a large class costs the most: write "
                "\\p{L}+, not \\p{L}{1,100})"
            )
        return f"is not a regular expression (RE2): {said}"
    return ""


@functools.lru_cache(maxsize=KEPT)
def _compiled(pattern: str) -> Any:
    return _compile(pattern)


@dataclass(frozen=True)
class MessagePattern:
    """A rule's ``onMessagePattern`` (``problem`` found none): compiled when searched."""

    text: str

    def search(self, text: str) -> object | None:
        """The first match of the pattern in ``text`` (not anchored), or None."""
        return _compiled(self.text).search(text)
