"""What `kubectl ddp` says when a job is refused: every error, each naming its field, whether the
local checks (``jobspec.resolve``) or the API server (a 422's ``details.causes``, the list
`kubectl apply` prints) found them. Pure: errors in, lines out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def api_errors(body: Any) -> tuple[str, list[str]]:
    """The headline and every error of an API server's refusal (its Status ``body``): each cause
    as ``field: message``; the message alone if it lists no causes."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        status = json.loads(text)
    except ValueError:
        return text.strip(), []
    if not isinstance(status, dict):
        return text.strip(), []
    message = str(status.get("message") or "")
    details = status.get("details") or {}
    causes = [c for c in details.get("causes") or () if isinstance(c, dict)]
    if not causes:
        return message, []
    kind, name = details.get("kind") or "object", details.get("name") or ""
    headline = f'{kind} "{name}" is invalid' if name else message.split(": ", 1)[0]
    errors = []
    for cause in causes:
        field, text = cause.get("field") or "", str(cause.get("message") or cause.get("reason"))
        errors.append(f"{field}: {text}" if field and field != "<nil>" else text)
    return headline, errors


def lines(headline: str, errors: Sequence[str]) -> list[str]:
    """One line for a single error (``headline: error``), else the headline with their count
    and one indented line per error."""
    if not errors:
        return [headline]
    if len(errors) == 1:
        return [f"{headline}: {errors[0]}" if headline else errors[0]]
    count = f"{len(errors)} errors"
    return [f"{headline}: {count}:" if headline else f"{count}:", *(f"  {e}" for e in errors)]
