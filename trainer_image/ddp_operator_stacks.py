"""Started at every Python process's start in the trainer image (``ddp_operator_stacks.pth`` in
its site-packages): a rank of a script that never calls ``report`` says where it stands once it
has been quiet for a while (``ddp_operator.progress_stacks.autostart``), so that the operator
names the rank that hung. Nothing happens outside a DDPJob's pod; nothing here ever raises:
an error in a ``.pth`` import would be printed by every Python process of the image."""


def _rank() -> int:
    from ddp_operator import progress  # only when a stack goes: no process starts with urllib

    return progress.rank()


def _send(payload: dict) -> bool:
    from ddp_operator import progress

    return progress.send_stack(payload)


try:
    from ddp_operator.progress_stacks import autostart
except Exception:  # (another ddp_operator first on the path: no stacks, nothing said)
    pass
else:
    autostart(_rank, _send)
