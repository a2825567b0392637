"""PyTorch's own NCCL watchdogs, set consistent with the job's stall detection (``decide/hangs``)
unless the template sets them: a collective that times out or fails tears the process down
(``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``, torch's default, made explicit), the monitor thread
aborts a process whose NCCL watchdog is itself stuck after the stall timeout
(``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``; torch's default is 480 s), and a timeout dumps the flight
recorder's last collectives (``TORCH_NCCL_DUMP_ON_TIMEOUT``). Names as torch 2.5 to 2.15 read
them (``ProcessGroupNCCL.hpp``, ``Utils.hpp``: read from each version's wheel).

The flight recorder's buffer has two names and two readers: the process group (and its dump
pipe) reads ``TORCH_NCCL_TRACE_BUFFER_SIZE`` only; the recorder, from torch 2.8,
``TORCH_FR_BUFFER_SIZE`` first. Their defaults differ by version (the recorder's is 0, nothing
recorded, up to torch 2.10), so both are set to BUFFER, or both to the template's value of
either: torch takes both, the new name winning, and warns once that the old one is
deprecated. torch logs the values it took at INFO
(``TORCH_CPP_LOG_LEVEL=INFO``), which tests/test_gpu_watchdogs.py reads. gloo has no
watchdog variables: its collectives time out after ``init_process_group(timeout=)``, 30 minutes
by default, and the operator's stall detection is the guard. Its process groups record into the
flight recorder too (torch 2.11+, ``TORCH_FR_BUFFER_SIZE`` alone: the old name would only warn),
which ``progress_stacks`` reads when a rank hangs, to name the collective it never joined.

Where a rank's dump goes (``TORCH_FR_DUMP_TEMP_FILE``, a prefix torch ends with the rank):
DUMP_DIR, an emptyDir of the pod (``add_dump_volume``), so that the dumps outlive the trainer
container, and an in-place restart, for ``torchfrtrace`` (``kubectl cp``); a recreated pod
starts with none. torch's default is inside the container, lost with it. NCCL writes there on a
collective's timeout; a quiet rank's watch writes there too (``progress_stacks.keep_dump``: gloo
dumps nothing on a timeout, and a stall comes before NCCL's). A template that names a dump path
(either name) keeps it, and gets no volume."""

from __future__ import annotations

from typing import Any

from ..model import constants as c
from ..model.jobspec import JobSpec
from ..model.stall_detection import CEILING

BUFFER = "2000"  # collectives the flight recorder keeps (torch 2.11+'s default)
BUFFER_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # new, old
DUMP_NAMES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")  # new (2.8+), old
DUMP_VOLUME = "ddp-flight-recorder"
DUMP_DIR = "/ddp-flight-recorder"
DUMP_PREFIX = f"{DUMP_DIR}/comm_lib_trace_rank_"  # torch's own name (2.9+), for torchfrtrace -p


def _env(template: Any) -> dict[str, Any]:
    return {
        e.get("name"): e.get("value")
        for ct in ((template or {}).get("spec") or {}).get("containers") or ()
        for e in ct.get("env") or ()
    }


def _buffer(template: Any) -> str:
    """The template's buffer size under either name (the new first), else BUFFER."""
    env = _env(template)
    return next((str(env[n]) for n in BUFFER_NAMES if env.get(n) is not None), BUFFER)


def keeps_dumps(job: JobSpec) -> bool:
    """Whether the job's ranks dump to DUMP_DIR: NCCL or gloo, stall detection on, and no dump
    path of the template's own."""
    named = _env(job.template).keys()
    return (
        job.backend in (c.BACKEND_NCCL, c.BACKEND_GLOO)
        and job.stall_detection.enabled
        and not any(n in named for n in DUMP_NAMES)
    )


def add_dump_volume(pod_spec: dict[str, Any], trainer: dict[str, Any], job: JobSpec) -> None:
    """Mount DUMP_DIR, an emptyDir, into the trainer where its ranks dump there, unless the
    trainer mounts a volume of its own there (it then keeps the dumps)."""
    if not keeps_dumps(job):
        return
    if any(m.get("mountPath") == DUMP_DIR for m in trainer.get("volumeMounts") or ()):
        return
    pod_spec.setdefault("volumes", []).append({"name": DUMP_VOLUME, "emptyDir": {}})
    trainer.setdefault("volumeMounts", []).append({"name": DUMP_VOLUME, "mountPath": DUMP_DIR})


def env(job: JobSpec) -> list[tuple[str, str]]:
    """The watchdogs' env of an NCCL job whose stall detection is on, the flight recorder's of
    a gloo one; none otherwise."""
    if not job.stall_detection.enabled:
        return []
    dump = [(DUMP_NAMES[0], DUMP_PREFIX)] if keeps_dumps(job) else []
    if job.backend == c.BACKEND_GLOO:
        return [(BUFFER_NAMES[0], _buffer(job.template)), *dump]
    if job.backend != c.BACKEND_NCCL:
        return []
    heartbeat = job.stall_detection.timeout_seconds or CEILING
    return [
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"),
        ("TORCH_NCCL_ENABLE_MONITORING", "1"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(heartbeat)),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        *((name, _buffer(job.template)) for name in BUFFER_NAMES),
        *dump,
    ]
