"""The JSON merge patch (RFC 7386) a job loop sends to write its status: a merge patch keeps
every field it does not name, so a field an object of the status lost (a failure record
replaced by one with fewer fields: a stall's has no exit code) is sent as null, or the server
would keep the old one beside the new. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The patch that turns the status fields of ``new`` from ``old`` into ``new``: each field
    that changed; an object field patched field by field, those it lost as null. Fields of
    ``old`` that ``new`` does not name are not the loop's (``progress``, ``checkpoint``: the
    progress desk's) and are left alone."""
    return {k: _patch(old.get(k), v) for k, v in new.items() if old.get(k) != v}


def _patch(old: Any, new: Any) -> Any:
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    out: dict[str, Any] = {k: None for k in old if k not in new}
    out.update({k: _patch(old.get(k), v) for k, v in new.items() if old.get(k) != v})
    return out
