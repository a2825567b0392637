"""Hot standby: a replica acts only while kopf's peering lets it (``--peering``: the live
replica of highest priority is active, the others wait paused).

kopf pauses its own watches while a peer of higher priority is alive; the job loops and pod
watches here are tasks and threads of our own, which kopf's pause does not reach. ``Standby``
follows kopf's pause: once paused, every loop and watch stops (``Runners.pause``: as an operator
killed, which each step is safe against) and no new one starts; on resume, kopf lists the jobs
again and their loops start afresh from what the cluster holds. A write already on its way when
the pause came cannot overwrite a newer status: status writes are conditional on the job's
resourceVersion (``runner``), and a pod is told an attempt only if it still carries the one
seen (``Kube.tell_pod``).

kopf keeps its pause in a ToggleSet it hands only to its daemon killer: ``capture`` takes it
from there (kopf's ``_core.engines.daemons.daemon_killer``, 1.44 and later); the operator refuses
to start with --peering when kopf no longer has it (tests/test_standby.py checks its signature).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._core.engines import daemons

log = logging.getLogger(__name__)


class Standby:
    """Whether this replica is paused by kopf's peering (never, standalone)."""

    def __init__(self) -> None:
        self.toggles: Any = None  # kopf's ToggleSet of pauses, once captured

    def paused(self) -> bool:
        return self.toggles is not None and self.toggles.is_on()

    def capture(self) -> None:
        """Take kopf's pause from the call that starts its daemon killer (made as the operator
        starts, before any handler runs)."""
        original = daemons.daemon_killer
        if "operator_paused" not in inspect.signature(original).parameters:
            raise RuntimeError("this kopf hides its peering pause: --peering cannot be used")

        def killer(**kwargs: Any) -> Awaitable[None]:
            self.toggles = kwargs["operator_paused"]
            return original(**kwargs)

        daemons.daemon_killer = killer

    async def follow(self, pause: Callable[[], Awaitable[None]]) -> None:
        """Call ``pause`` each time kopf pauses this replica (run as a task while it lives)."""
        if self.toggles is None:
            return
        while True:
            await self.toggles.wait_for(True)
            log.info("paused by peering (a replica of higher priority is active): stopping")
            await pause()
            await self.toggles.wait_for(False)
            log.info("resumed by peering: taking the jobs over")


standby = Standby()
