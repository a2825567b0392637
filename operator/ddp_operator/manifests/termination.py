"""What a trainer leaves behind when it fails, for the job to name (``failure_facts``): its
termination message holds the last lines of its output (``FallbackToLogsOnError``: the kubelet
takes the log's last 2048 bytes when the script wrote no message). Under torchrun they end with
its "Root Cause" block: the failing local rank, and with ``@record`` on the script's main its
traceback. ``TORCHELASTIC_ERROR_FILE`` is not pointed at the message's path: torchrun first
deletes that file, which the kubelet's mount refuses (measured: tests/data/termination/README.md).
What the template sets is kept."""

from __future__ import annotations

from typing import Any


def add(container: dict[str, Any]) -> None:
    """Give the trainer container its termination message policy, unless it has one."""
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
