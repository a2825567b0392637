"""The operator's start-up helpers in a DDPJob's worker, whatever its image (delivered with
``ddp_operator``'s progress modules, first on the trainer's ``PYTHONPATH``: ``manifests/
helpers_pod.py``). Python 3.9 and later, the standard library only; nothing here prints or
raises: it runs in every Python process of the pod (a shell's, pip's, a DataLoader worker's).

``start()`` (from ``sitecustomize``, at each process's start): a rank of a script that never
calls ``report`` says where it stands once it has been quiet for a while
(``ddp_operator.progress_stacks.autostart``), so that the operator names the rank that hung.
Nothing happens outside a DDPJob's pod.

``lightning_callbacks()``: the factory Lightning's entry point names (this directory's
``.dist-info``). Where ``ddp-operator`` is installed in the image its own entry point adds the
callback, and this one adds none: one callback, from the installed copy.
"""

from __future__ import annotations

from typing import Any


def _rank() -> int:
    from ddp_operator import progress  # only when a stack goes: no process starts with urllib

    return progress.rank()


def _send(payload: dict[str, Any]) -> bool:
    from ddp_operator import progress

    return progress.send_stack(payload)


def start() -> None:
    try:
        from ddp_operator.progress_stacks import autostart
    except Exception:  # (an installed ddp_operator without it first: no stacks, nothing said)
        return
    autostart(_rank, _send)


def _installed() -> bool:
    """Whether ``ddp-operator`` is installed in the image (its own entry points then count)."""
    try:
        from importlib.metadata import distribution

        distribution("ddp-operator")
    except Exception:
        return False
    return True


def lightning_callbacks() -> list[Any]:
    if _installed():
        return []
    from ddp_operator.lightning_progress import callbacks

    return callbacks()


def pytorch_lightning_callbacks() -> list[Any]:
    if _installed():
        return []
    from ddp_operator.lightning_progress import pytorch_lightning_callbacks as made

    return made()
