"""The steps of a plan as the job loop awaits them: each one's error says which step it was."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

from ..decide.failures import StepFailed

T = TypeVar("T")


async def step(what: str, action: Awaitable[T]) -> T:
    """Await one step of a plan; its error, if any, says which step it was."""
    try:
        return await action
    except Exception as exc:
        raise StepFailed(what, exc) from exc


async def all_steps(steps: Iterable[tuple[str, Awaitable[T]]]) -> list[T]:
    """Run steps concurrently; all of them finish; the first error, if any, is raised."""
    results = await asyncio.gather(*(step(w, a) for w, a in steps), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]
