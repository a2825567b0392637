"""PyTorch's own NCCL watchdogs, set consistent with the job's stall detection (``decide/hangs``)
unless the template sets them: a collective that times out or fails tears the process down
(``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``, torch's default, made explicit), the monitor thread
aborts a process whose NCCL watchdog is itself stuck after the stall timeout
(``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``; torch's default is 480 s), and a timeout dumps the flight
recorder's last collectives (``TORCH_NCCL_DUMP_ON_TIMEOUT``; its buffer,
``TORCH_FR_BUFFER_SIZE``, is 2000 by default). Names as torch 2.15 reads them
(``ProcessGroupNCCL.hpp``); torch logs the values it took at INFO
(``TORCH_CPP_LOG_LEVEL=INFO``), which tests/test_gpu_watchdogs.py reads. gloo has no such
variables: its collectives time out after ``init_process_group(timeout=)``, 30 minutes by
default, and the operator's stall detection is the guard."""

from __future__ import annotations

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.stall_detection import CEILING


def env(job: JobSpec) -> list[tuple[str, str]]:
    """The watchdogs' env of an NCCL job whose stall detection is on; none otherwise."""
    if job.backend != c.BACKEND_NCCL or not job.stall_detection.enabled:
        return []
    heartbeat = job.stall_detection.timeout_seconds or CEILING
    return [
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"),
        ("TORCH_NCCL_ENABLE_MONITORING", "1"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(heartbeat)),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
    ]
