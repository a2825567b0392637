"""Status conditions and Events: the vocabulary in which the planner reports a job."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..model import constants as c

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the DDPJob."""

    type: str
    reason: str
    message: str


def format_time(t: datetime) -> str:
    """RFC 3339 as Kubernetes writes it (seconds, UTC, 'Z')."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_precise(t: datetime) -> str:
    """RFC 3339 with milliseconds (UTC, 'Z'): a report's time, from which step times of a
    fraction of a second are measured (whole seconds made them 5% off over 20 steps)."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_time(value: str | None) -> datetime | None:
    """Parse a Kubernetes timestamp; None stays None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def condition(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of the given type, if present."""
    return next((cd for cd in conditions if cd.get("type") == type_), None)


def is_true(conditions: Iterable[Mapping[str, Any]], type_: str) -> bool:
    """Whether the condition of the given type is present and True."""
    cond = condition(conditions, type_)
    return bool(cond) and cond.get("status") == "True"


class Conditions:
    """A status.conditions list being updated, recording the Events its transitions imply."""

    def __init__(self, current: Iterable[Mapping[str, Any]], now: datetime, generation: int):
        self.items = [dict(cd) for cd in current]
        self.now = format_time(now)
        self.generation = generation
        self.events: list[Event] = []

    def true(self, type_: str) -> bool:
        return is_true(self.items, type_)

    def set(
        self, type_: str, value: bool, reason: str, message: str, event: str | None = None
    ) -> None:
        """Set a condition; a change of status moves lastTransitionTime; a change of status or
        reason posts ``event`` (a type: Normal or Warning), if given."""
        status = "True" if value else "False"
        new = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "observedGeneration": self.generation,
        }
        old = condition(self.items, type_)
        if old is None:
            new["lastTransitionTime"] = self.now
            self.items.append(new)
        elif old.get("status") != status:
            new["lastTransitionTime"] = self.now
            old.clear()
            old.update(new)
        else:
            new["lastTransitionTime"] = old.get("lastTransitionTime") or self.now
            same_reason = old.get("reason") == reason
            old.clear()
            old.update(new)
            if same_reason:
                return
        if event:
            self.events.append(Event(event, reason, message))

    def clear(self, type_: str, reason: str, message: str, event: str | None = None) -> None:
        """Set a condition False, but only if it is there at all."""
        if condition(self.items, type_) is not None:
            self.set(type_, False, reason, message, event)


PROGRESS_KEYS = frozenset({"workers", "conditions", "worldSize"})
COUNTING = frozenset({c.COND_CREATED, c.COND_RUNNING})  # their messages count workers


def _standing(conditions: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The conditions, less the messages of those that count workers."""
    return [
        {k: v for k, v in cd.items() if k != "message" or cd.get("type") not in COUNTING}
        for cd in conditions
    ]


def progress_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether ``new`` differs from ``old`` only in progress: the worker counts and the messages
    of the conditions that count them (as "12 of 512 workers exist"); any other change, such as
    a condition's status, reason or another condition's message, is not."""
    changed = {k for k in new if old.get(k) != new[k]}
    return (
        bool(changed)
        and changed <= PROGRESS_KEYS
        and _standing(old.get("conditions") or []) == _standing(new.get("conditions") or [])
    )
