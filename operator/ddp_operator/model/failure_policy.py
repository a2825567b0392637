"""``spec.failurePolicy`` resolved: the rules that map a worker's failure to what the job does
(``decide/failure_policy`` applies them), and the limits of the restarts and replacements that
``backoffLimit`` does not count, and of the restarts in a row that made no progress
(``decide/goodput``). Pure.

``onMessagePattern`` is RE2, checked and compiled within a bound of memory by
``message_patterns``; a job's rules are bounded in number and in the patterns' total length
(``MAX_RULES``, ``MAX_PATTERNS_LENGTH``: the CRD says the same at ``kubectl apply``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .message_patterns import MessagePattern, problem

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
# Bad nodes (``decide/blame``, ``decide/exclusion``): how many nodes one job may keep out, and
# after how many deciding failures in a row of one worker on one node that node is blamed.
DEFAULT_MAX_EXCLUDED_NODES = 3
DEFAULT_BLAME_NODE_AFTER = 2

# What one job's rules may cost the operator (the CRD's maxItems and CEL rule say the same).
MAX_RULES = 20
MAX_PATTERN_LENGTH = 1024  # characters of one onMessagePattern
MAX_PATTERNS_LENGTH = 4096  # characters of all its rules' onMessagePattern together


@dataclass(frozen=True)
class Rule:
    """One rule: every matcher it has must match a failure; ``name`` (or ``rules[i]``) names
    it in the job's messages."""

    name: str
    action: str
    exit_codes: tuple[str, frozenset[int]] | None = None  # (In or NotIn, codes)
    reasons: frozenset[str] | None = None
    pod_conditions: tuple[tuple[str, str | None], ...] | None = None  # (type, reason or any)
    message_pattern: MessagePattern | None = None  # RE2
    blame_node: bool = False  # a failure it matches is blamed on its node (``decide/blame``)


@dataclass(frozen=True)
class FailurePolicy:
    rules: tuple[Rule, ...] = ()
    max_uncounted_restarts: int = DEFAULT_MAX_UNCOUNTED_RESTARTS
    max_replacements: int = DEFAULT_MAX_REPLACEMENTS
    max_restarts_without_progress: int = DEFAULT_MAX_RESTARTS_WITHOUT_PROGRESS
    max_excluded_nodes: int = DEFAULT_MAX_EXCLUDED_NODES  # 0: no node is ever kept out
    blame_node_after: int = DEFAULT_BLAME_NODE_AFTER  # 0: never blamed for repeats alone


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
        message_pattern=_pattern(pattern, f"{path}.onMessagePattern", errors),
        blame_node=raw.get("blameNode") is True,
    )


def _pattern(pattern: Any, path: str, errors: list[str]) -> MessagePattern | None:
    """A rule's ``onMessagePattern``, checked once per text (``message_patterns``)."""
    if pattern is None:
        return None
    text = str(pattern)
    if not text:
        errors.append(f"{path} must not be empty")
    elif len(text) > MAX_PATTERN_LENGTH:
        errors.append(f"{path} must be at most {MAX_PATTERN_LENGTH} characters")
    elif said := problem(text):
        errors.append(f"{path} {said}")
    else:
        return MessagePattern(text)
    return None


def _bound(rules: Any, path: str, errors: list[str]) -> None:
    """What one job's rules may cost: ``MAX_RULES`` rules, ``MAX_PATTERNS_LENGTH`` characters of
    patterns together."""
    if len(rules) > MAX_RULES:
        errors.append(f"{path} must have at most {MAX_RULES} items, not {len(rules)}")
    length = sum(len(str((r or {}).get("onMessagePattern") or "")) for r in rules)
    if length > MAX_PATTERNS_LENGTH:
        errors.append(
            f"{path}: the onMessagePattern of a job's rules must add up to at most "
            f"{MAX_PATTERNS_LENGTH} characters, not {length}"
        )


def resolve(raw: Mapping[str, Any] | None, errors: list[str]) -> FailurePolicy:
    """``spec.failurePolicy`` (None: the defaults); its problems appended to ``errors``, each
    naming its field."""
    if not raw:
        return FailurePolicy()
    at = "spec.failurePolicy"
    rules = raw.get("rules") or ()
    _bound(rules, f"{at}.rules", errors)
    return FailurePolicy(
        rules=tuple(
            _rule(r or {}, f"{at}.rules[{i}]", errors) for i, r in enumerate(rules[:MAX_RULES])
        ),
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
        max_excluded_nodes=_count(
            raw,
            "maxExcludedNodes",
            f"{at}.maxExcludedNodes",
            DEFAULT_MAX_EXCLUDED_NODES,
            errors,
        ),
        blame_node_after=_count(
            raw, "blameNodeAfter", f"{at}.blameNodeAfter", DEFAULT_BLAME_NODE_AFTER, errors
        ),
    )
