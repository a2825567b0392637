"""How soon a job's loop plans again after a change: a burst of pod events lands first, and a
job whose passes are costly (thousands of workers) spends at most SHARE of the time planning,
however fast its pods change. Without it, a job of 4096 workers coming up planned back to back:
the operator's CPU grew as the square of the group (6.3 CPU s at 2048 workers, 19.5 at 4096)."""

from __future__ import annotations

SETTLE_SECONDS = 0.1  # lets a burst of pod events land before a pass
SHARE = 0.1  # of the time, at most, that one job's planning takes while its pods change
MAX_SETTLE_SECONDS = 2.0  # the longest a change waits for a pass (a pass of 0.22 s or more)


def settle(spent: float) -> float:
    """Seconds to wait after a wake-up before the next pass, when the last pass's decisions
    took ``spent`` seconds: at least SETTLE_SECONDS, at most MAX_SETTLE_SECONDS."""
    return min(MAX_SETTLE_SECONDS, max(SETTLE_SECONDS, spent * (1 - SHARE) / SHARE))
