"""Where each rank stands when its training stops: started by ``progress.report`` on every
rank, a daemon thread sends the rank's main-thread Python stack to the operator once the rank
has not called ``report`` for a while, once per such spell. On a stall, the operator names the
rank that stands outside torch while the others wait in a collective (``decide/culprit``):
the rank that never joined it.

"A while" is QUIET_FACTOR times the rank's usual gap between two calls, and at least
LEAST_QUIET seconds (``DDP_STACK_AFTER`` overrides it): a healthy job sends nothing, and a
long step sends once. The standard library only, like ``progress``; it never raises into the
training and never blocks it (its thread alone waits on the network).

With the stack goes where the rank stands in each process group's collectives, read from
torch's flight recorder in the rank's own process (``collectives``: plain numbers and names, as
JSON; never a pickle): the operator then names the collective the hung rank never joined.

A script that never calls ``report`` is watched by its CPU time instead (``autostart``, run at the
start of every Python process of a worker by the operator's delivered ``sitecustomize``, whatever
its image): once the process has joined a process group, it is quiet while it uses under
QUIET_SHARE of a core (a rank blocked in a gloo collective, asleep or deadlocked uses 1%; one
computing, loading or saving uses more), and sends its stack after LEAST_QUIET seconds of it. Its
flight recorder counts too: a rank that began or ended a collective since its last look moves; one
that has stood in one unfinished collective since is quiet whatever its CPU (an NCCL rank waiting
for the others spins a core in CUDA's synchronisation). While the spell lasts, it says so again
every RESEND seconds (``quietSeconds`` growing), and once it is over that it moves again: the
operator counts only a rank that still says so (``decide/quiet``). With its first stack of a
spell, it writes its recorder's dump where torch would on a timeout (``keep_dump``), for
``torchfrtrace``. A rank that calls ``report`` goes by its calls alone.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

AFTER_ENV = "DDP_STACK_AFTER"
LEAST_QUIET = 15.0  # seconds: under the least stall timeout (30 s) with a poll to spare
QUIET_FACTOR = 3.0
POLL = 2.0  # seconds between two looks
GAPS = 20  # the recent gaps between calls the usual one is taken from
MAX_FRAMES = 12  # innermost
MAX_FRAME_CHARS = 200
MAX_GROUPS = 8  # process groups said, the first by id
MAX_NAME_CHARS = 64
QUIET_SHARE = 0.05  # of a core, over a poll: as the pod's watch judges (QUIET_PERCENT)
RESEND = 30.0  # seconds between two stacks of one quiet spell (by CPU)
URL_ENV = "DDP_PROGRESS_URL"  # as ``progress`` reads it: set in a DDPJob's pods
DUMP_ENV = "TORCH_FR_DUMP_TEMP_FILE"  # where torch writes a rank's dump: a prefix, the rank after
_reports = threading.Event()  # this process calls ``report``: its calls say when it is quiet


def frames(thread: threading.Thread) -> list[str]:
    """``thread``'s stack, innermost last, as ``path:line function`` (the path's last two
    parts, or from ``torch/`` on); at most MAX_FRAMES."""
    import traceback  # (json, statistics, traceback when used: every process loads this module)

    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return []
    found = []
    for summary in traceback.extract_stack(frame)[-MAX_FRAMES:]:
        path = summary.filename.replace(os.sep, "/")
        at = path.rfind("/torch/")
        short = path[at + 1 :] if at >= 0 else "/".join(path.split("/")[-2:])
        found.append(f"{short}:{summary.lineno} {summary.name}"[:MAX_FRAME_CHARS])
    return found


def _recorded(backend: str) -> dict[str, Any] | None:
    """torch's flight recorder's dump of ``backend``'s process groups (its active collectives
    and each group's status), if this torch has one: ``_dump_fr_trace_json(..., backend)`` in
    torch 2.15; in torch 2.11 (seen on a GPU) that name takes no backend, and NCCL's recorder is
    ``_dump_nccl_trace_json``."""
    import json

    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return None
    try:
        return json.loads(dump(True, True, backend))
    except TypeError:  # (an older signature: no backend)
        if backend == "nccl":
            dump = getattr(c10d, "_dump_nccl_trace_json", None)
        return json.loads(dump(True, True)) if dump else None


def summarize(dump: dict[str, Any]) -> list[dict[str, Any]]:
    """Where a rank stands in each process group, from its flight recorder's dump (as JSON, or
    a dump file's plain data): the sequence number of the last collective it ``entered`` and of
    the last ``completed``, and the ``op`` of the one entered (``all_reduce``); the first
    MAX_GROUPS groups by id."""
    ops: dict[tuple[str, int], str] = {}
    groups: dict[str, str] = {}
    for e in dump.get("entries") or ():
        pg, seq = str(e.get("pg_id")), int(e.get("collective_seq_id") or 0)
        ops[pg, seq] = str(e.get("profiling_name") or "").split(":")[-1]
        groups[pg] = str((e.get("process_group") or ["", ""])[-1])
    for pg, config in (dump.get("pg_config") or {}).items():
        groups.setdefault(str(pg), str(config.get("desc") or ""))
    said = []
    for pg, st in sorted((dump.get("pg_status") or {}).items())[:MAX_GROUPS]:
        entered = int(st.get("last_enqueued_collective", -1))
        said.append(
            {
                "group": (groups.get(pg) or f"pg {pg}")[:MAX_NAME_CHARS],
                "entered": entered,
                "completed": int(st.get("last_completed_collective", -1)),
                "op": ops.get((pg, entered), "")[:MAX_NAME_CHARS],
            }
        )
    return said


def collectives() -> list[dict[str, Any]]:
    """Where this rank stands in each process group (``summarize``), from torch's flight
    recorder (recording where ``TORCH_FR_BUFFER_SIZE`` is set, as the operator does). Empty
    where torch.distributed is not in use here, or its recorder is off or unknown to this torch;
    never raises (torch is only used if the script imported it)."""
    dist = sys.modules.get("torch.distributed")
    said: dict[str, dict[str, Any]] = {}  # by group: a group of both backends, NCCL's
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return []
        names = str(dist.get_backend()).replace(",", ":").split(":")
        for backend in sorted({n for n in names if n in ("gloo", "nccl")}):
            said.update((c["group"], c) for c in summarize(_recorded(backend) or {}))
    except Exception:  # a torch that dumps otherwise: the stack goes without
        return []
    return list(said.values())[:MAX_GROUPS]


def _dump(backend: str) -> bytes | None:
    """torch's flight recorder's whole dump of ``backend``'s process groups, pickled as torch
    writes it on a timeout (``_dump_fr_trace`` in torch 2.15, NCCL's ``_dump_nccl_trace`` in
    2.11), without the collectives' stack traces: the rank's stack says where it stands, and
    symbolizing them took 2.6 s of CPU for 29 collectives here, enough to end the pod's quiet
    window (``inplace_pod``); None where this torch has neither."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    try:
        return bytes(c10d._dump_fr_trace(True, False, False, backend))  # type: ignore[union-attr]
    except (AttributeError, TypeError):
        dump = getattr(c10d, "_dump_nccl_trace", None) if backend == "nccl" else None
        return bytes(dump(True, False, False)) if dump else None


def keep_dump(rank: int) -> None:
    """Write this rank's flight-recorder dump where torch writes it on a timeout
    (``DUMP_ENV`` and the rank; the operator mounts a volume there that outlives an in-place
    restart), as a quiet rank: gloo dumps nothing on a timeout, and a stall ends an NCCL hang
    before its timeout. Nothing where the variable is unset; never raises."""
    prefix = os.environ.get(DUMP_ENV)
    dist = sys.modules.get("torch.distributed")
    if not prefix or dist is None:
        return
    try:
        names = str(dist.get_backend()).replace(",", ":").split(":")
        data = _dump("nccl" if "nccl" in names else "gloo")
        if data:
            path = f"{prefix}{rank}"
            part = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.part")
            with open(part, "wb") as f:  # (not under the prefix: torchfrtrace reads those)
                f.write(data)
            os.replace(part, path)
    except Exception:  # (a full disk, a torch that dumps otherwise: the stack goes anyway)
        return


def standing() -> tuple[tuple[str, int, int], ...]:
    """Where this rank stands in its collectives, by its flight recorder: (group, entered,
    completed) for each group; empty where its recorder does not say."""
    return tuple((c["group"], c["entered"], c["completed"]) for c in collectives())


def _in_group() -> bool:
    """Whether this process has joined a process group (a rank; torchrun's agent never does)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist is not None and dist.is_available() and dist.is_initialized()
    except Exception:
        return False


class StackWatch:
    """Sends this rank's stack through ``send`` once it has been quiet for a while: without a
    call for a while, or (``by_cpu``) a rank using no CPU for a while."""

    def __init__(
        self,
        rank: Callable[[], int],
        send: Callable[[dict[str, Any]], bool],
        by_cpu: bool = False,
    ) -> None:
        self.rank, self.send, self.by_cpu = rank, send, by_cpu
        self.main = threading.main_thread()
        self._called = time.monotonic()
        self._gaps: list[float] = []
        self._sent: float | None = None  # when this quiet spell's latest stack went
        self._stood: tuple[tuple[str, int, int], ...] | None = None  # ``standing`` at the last look
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ddp-stack", daemon=True)
        try:
            self._fixed: float | None = float(os.environ[AFTER_ENV])
        except (KeyError, ValueError):
            self._fixed = None

    def start(self) -> None:
        self._thread.start()

    def called(self) -> None:
        """``report`` was called: the rank advances; a new spell begins."""
        _reports.set()
        now = time.monotonic()
        with self._lock:
            self._gaps = [*self._gaps[-(GAPS - 1) :], now - self._called]
            self._called, self._sent = now, None

    def after(self) -> float:
        """Seconds without a call after which the rank is quiet."""
        import statistics

        if self._fixed is not None:
            return self._fixed
        usual = statistics.median(self._gaps) if self._gaps else 0.0
        return max(LEAST_QUIET, QUIET_FACTOR * usual)

    def _active(self, busy: bool) -> bool:
        """The rank computed (or is no rank yet): its quiet spell, if any, ends; one it spoke of
        is said to be over (``moving``), or its last stack would stand for it until it aged.
        Whether that went."""
        if not busy:
            return False
        with self._lock:
            spoke = self._sent is not None
            self._called, self._sent = time.monotonic(), None
        if spoke:
            self.send({"stack": {"rank": self.rank(), "frames": [], "moving": True}})
        return spoke

    def _run(self) -> None:
        cpu, at = time.process_time(), time.monotonic()
        while True:
            time.sleep(POLL)
            if self.by_cpu:
                if _reports.is_set():  # the script reports: its own watch says
                    return
                used, now = time.process_time(), time.monotonic()
                ranked = _in_group()
                stands = standing() if ranked else None
                moved, self._stood = stands != self._stood, stands  # a collective began or ended
                stuck = any(entered > completed for _, entered, completed in stands or ())
                busy = used - cpu >= QUIET_SHARE * (now - at)
                said = self._active(not ranked or moved or (busy and not stuck))
                cpu, at = (time.process_time(), time.monotonic()) if said else (used, now)
            with self._lock:
                now = time.monotonic()
                quiet = now - self._called
                first = self._sent is None
                again = self.by_cpu and not first and now - (self._sent or now) >= RESEND
                due = quiet >= self.after() and (first or again)
                self._sent = now if due else self._sent
            if due:
                rank = self.rank()
                stack = {"rank": rank, "frames": frames(self.main)}
                if said := collectives():
                    stack["collectives"] = said
                    if first:
                        keep_dump(rank)
                self.send({"stack": {**stack, "quietSeconds": round(quiet)}})
                cpu, at = time.process_time(), time.monotonic()  # its own sending is no work


_autostarted: list[bool] = []  # one watch a process, however many start it


def autostart(rank: Callable[[], int], send: Callable[[dict[str, Any]], bool]) -> None:
    """Watch this process by its CPU time, in a DDPJob's pod (``URL_ENV`` set): for the delivered
    ``sitecustomize``, at the start of every Python process (``rank`` and ``send`` as
    ``progress`` gives them: it is imported only when a stack goes); once, however often it is
    called (an image's own ``.pth`` may start it too); never raises."""
    if not os.environ.get(URL_ENV) or _autostarted:
        return
    _autostarted.append(True)
    import contextlib

    with contextlib.suppress(Exception):  # (never in the way of the process)
        StackWatch(rank, send, by_cpu=True).start()
