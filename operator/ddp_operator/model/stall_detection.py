"""``spec.stallDetection`` resolved: whether a job whose training stops advancing is failed
(``decide/hangs``), and after how long. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LEAST_TIMEOUT = 30  # seconds: reports come every 10 s by default (DDP_PROGRESS_INTERVAL)
# The automatic timeout: STEPS of the attempt's step intervals, within FLOOR and CEILING seconds
# (CEILING until an interval is known: well under PyTorch's 600 s NCCL collective timeout).
# Never under LEAST_STEPS step intervals, though: a step slower than CEILING / LEAST_STEPS is no
# hang. A phase the script announced (``report(phase=...)``) gets its own bound, PHASE_DEFAULT
# seconds if it gave none.
STEPS, FLOOR, CEILING, LEAST_STEPS = 10, 120, 300, 3
PHASE_DEFAULT = 3600


@dataclass(frozen=True)
class StallDetection:
    enabled: bool = True
    timeout_seconds: int | None = None  # None: automatic, from the attempt's step interval


def resolve(raw: Mapping[str, Any] | None, errors: list[str]) -> StallDetection:
    """``spec.stallDetection`` (None: the defaults); its problems appended to ``errors``."""
    if not raw:
        return StallDetection()
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        errors.append(f"spec.stallDetection.enabled must be true or false, not {enabled!r}")
        enabled = True
    timeout = raw.get("timeoutSeconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < LEAST_TIMEOUT
    ):
        errors.append(
            f"spec.stallDetection.timeoutSeconds must be an integer of at least {LEAST_TIMEOUT}, "
            f"not {timeout!r}"
        )
        timeout = None
    return StallDetection(enabled, timeout)
