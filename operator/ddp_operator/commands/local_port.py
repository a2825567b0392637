"""The rendezvous port a local run (`kubectl ddp local`, the SDK's ``LocalClient``) takes.

All workers of a local run share this machine's ports, and torch's rendezvous store listens on
worker 0's port on every address, so two runs on one machine must not take the same port. A
run holds its port for as long as it runs: a lock file per port (``flock``, released by the
kernel when the run's process ends, however it ends) keeps other local runs off it, even two
starting at the same moment, before either has bound it; a bind keeps any other program's port
off it. The job's own port (``spec.masterPort``) when it is free, else one the kernel picks,
with a line that says so: scripts read the port from ``MASTER_PORT`` and torchrun's env.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..model.jobspec import JobSpec

TRIES = 20  # kernel-picked ports tried after the job's own


def _locks() -> Path:
    return Path(tempfile.gettempdir()) / f"ddp-local-ports-{os.getuid()}"


def bindable(port: int) -> bool:
    """Whether this machine can listen on ``port`` on every address, as the store does
    (SO_REUSEADDR: a port in TIME_WAIT is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
        return True


def _kernel_pick() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def reserved(job: JobSpec) -> Iterator[tuple[JobSpec, str | None]]:
    """The job as it runs here (its port one no other local run holds and this machine can
    listen on) and the line saying it moved (None: it did not), the port held until the block
    ends. Raises OSError when no port can be had."""
    folder = _locks()
    folder.mkdir(mode=0o700, exist_ok=True)
    for port in itertools.chain([job.master_port], (_kernel_pick() for _ in range(TRIES))):
        lock = folder / str(port)
        held = lock.open("w")
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.close()
            continue
        if not bindable(port):
            held.close()
            continue
        try:
            if port == job.master_port:
                yield job, None
            else:
                said = (
                    f"warning: the rendezvous port {job.master_port} (spec.masterPort) is in use "
                    f"on this machine; this run uses {port}"
                )
                yield dataclasses.replace(job, master_port=port), said
        finally:
            if port != job.master_port:  # a kernel-picked port's lock is not left behind
                with contextlib.suppress(OSError):
                    lock.unlink()
            held.close()
        return
    raise OSError(f"no free port for the rendezvous on this machine ({TRIES + 1} tried)")
