"""``spec.failurePolicy`` resolved: the rules that map a worker's failure to what the job does
(``decide/failure_policy`` applies them), and the limits of the restarts and replacements that
``backoffLimit`` does not count, and of the restarts in a row that made no progress
(``decide/goodput``). Pure.

``onMessagePattern`` is compiled with RE2 (``google-re2``), the dialect the API server checks it
in: matching takes time linear in the text, so no tenant's pattern can stall the operator (Python's
``re`` backtracks: ``(a+)+b`` runs for days on 40 characters)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import re2

# The actions a rule may name.
RESTART_GROUP = "RestartGroup"  # the whole group restarts, counted against backoffLimit
RESTART_GROUP_NOT_COUNTED = "RestartGroupNotCounted"  # ... not counted (maxUncountedRestarts)
FAIL_JOB = "FailJob"  # the job fails now
REPLACE_WORKER = "ReplaceWorker"  # an elastic job replaces the worker alone (maxReplacements)
ACTIONS = (RESTART_GROUP, RESTART_GROUP_NOT_COUNTED, FAIL_JOB, REPLACE_WORKER)
OPERATORS = ("In", "NotIn")

DEFAULT_MAX_UNCOUNTED_RESTARTS = 10
DEFAULT_MAX_REPLACEMENTS = 10
DEFAULT_MAX_RESTARTS_WITHOUT_PROGRESS = 3  # as NVIDIA's fault-tolerance launcher (decide/goodput)


_RE2 = re2.Options()
_RE2.log_errors = False  # a bad pattern is the job's error, not the operator's log's


class Pattern(Protocol):
    """A compiled ``onMessagePattern`` (RE2)."""

    def search(self, text: str) -> object | None: ...


def compile_pattern(pattern: str) -> Pattern:
    """``pattern`` compiled by RE2; ``ValueError`` with RE2's words where it does not parse."""
    try:
        return re2.compile(pattern, _RE2)
    except re2.error as exc:
        words = exc.args[0] if exc.args else exc
        raise ValueError(words.decode() if isinstance(words, bytes) else str(words)) from None


@dataclass(frozen=True)
class Rule:
    """One rule: every matcher it has must match a failure; ``name`` (or ``rules[i]``) names
    it in the job's messages."""

    name: str
    action: str
    exit_codes: tuple[str, frozenset[int]] | None = None  # (In or NotIn, codes)
    reasons: frozenset[str] | None = None
    pod_conditions: tuple[tuple[str, str | None], ...] | None = None  # (type, reason or any)
    message_pattern: Pattern | None = None  # RE2


@dataclass(frozen=True)
class FailurePolicy:
    rules: tuple[Rule, ...] = ()
    max_uncounted_restarts: int = DEFAULT_MAX_UNCOUNTED_RESTARTS
    max_replacements: int = DEFAULT_MAX_REPLACEMENTS
    max_restarts_without_progress: int = DEFAULT_MAX_RESTARTS_WITHOUT_PROGRESS


def _count(raw: Mapping[str, Any], key: str, path: str, default: int, errors: list[str]) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.append(f"{path} must be an integer of at least 0, not {value!r}")
        return default
    return value


def _rule(raw: Mapping[str, Any], path: str, errors: list[str]) -> Rule:
    action = raw.get("action")
    if action not in ACTIONS:
        errors.append(f"{path}.action must be one of {', '.join(ACTIONS)}, not {action!r}")
    codes = raw.get("onExitCodes")
    exit_codes = None
    if codes is not None:
        values = codes.get("values") or []
        if codes.get("operator") not in OPERATORS:
            errors.append(f"{path}.onExitCodes.operator must be In or NotIn")
        if not values or any(not isinstance(v, int) or not 0 <= v <= 255 for v in values):
            errors.append(f"{path}.onExitCodes.values must be 1 or more integers 0-255")
        exit_codes = (str(codes.get("operator")), frozenset(values))
    reasons = raw.get("onReasons")
    if reasons is not None and not reasons:
        errors.append(f"{path}.onReasons must name at least one reason")
    conditions = raw.get("onPodConditions")
    if conditions is not None and (not conditions or any(not c.get("type") for c in conditions)):
        errors.append(f"{path}.onPodConditions must be 1 or more conditions, each with a type")
    pattern = raw.get("onMessagePattern")
    compiled = None
    if pattern is not None:
        try:
            compiled = compile_pattern(str(pattern)) if pattern else None
        except ValueError as exc:
            errors.append(f"{path}.onMessagePattern is not a regular expression (RE2): {exc}")
        if not pattern:
            errors.append(f"{path}.onMessagePattern must not be empty")
    if codes is None and reasons is None and conditions is None and pattern is None:
        errors.append(
            f"{path}: a rule needs at least one matcher: onExitCodes, onReasons, "
            "onPodConditions or onMessagePattern"
        )
    return Rule(
        name=str(raw.get("name") or path.removeprefix("spec.failurePolicy.")),
        action=str(action),
        exit_codes=exit_codes,
        reasons=frozenset(map(str, reasons)) if reasons else None,
        pod_conditions=tuple((str(c["type"]), c.get("reason")) for c in conditions or ()) or None,
        message_pattern=compiled,
    )


def resolve(raw: Mapping[str, Any] | None, errors: list[str]) -> FailurePolicy:
    """``spec.failurePolicy`` (None: the defaults); its problems appended to ``errors``, each
    naming its field."""
    if not raw:
        return FailurePolicy()
    at = "spec.failurePolicy"
    rules = raw.get("rules") or ()
    return FailurePolicy(
        rules=tuple(_rule(r or {}, f"{at}.rules[{i}]", errors) for i, r in enumerate(rules)),
        max_uncounted_restarts=_count(
            raw,
            "maxUncountedRestarts",
            f"{at}.maxUncountedRestarts",
            DEFAULT_MAX_UNCOUNTED_RESTARTS,
            errors,
        ),
        max_replacements=_count(
            raw, "maxReplacements", f"{at}.maxReplacements", DEFAULT_MAX_REPLACEMENTS, errors
        ),
        max_restarts_without_progress=_count(
            raw,
            "maxRestartsWithoutProgress",
            f"{at}.maxRestartsWithoutProgress",
            DEFAULT_MAX_RESTARTS_WITHOUT_PROGRESS,
            errors,
        ),
    )
