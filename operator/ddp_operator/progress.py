"""Progress reporting for training scripts: ``report(step, total, loss=..., samples_per_s=...)``
puts the job's progress on its DDPJob (``status.progress``, ``kubectl get ddpj``, the operator's
metrics).

Before a long stretch without steps (a checkpoint save, an evaluation), say so:
``report(step, total, phase="checkpoint", phase_timeout=900)``; stall detection then waits for
that phase's own bound (``phase_timeout`` seconds, an hour if not given) instead of the stall
timeout, and the next report without a phase ends it. A phase other than the one last sent goes
at once (one phase after another, a save at every step, still go at most twice an interval).

Once a checkpoint is saved (every rank's part written: after ``dcp.save`` returns, or after
``dcp.async_save``'s future completes), say so: ``checkpoint(step, path)``. The job shows it
(``status.checkpoint``, kept across restarts), sends it at once, and gives each later attempt's
containers ``DDP_RESUME_STEP`` and ``DDP_RESUME_PATH``: ``last_checkpoint()`` reads them, so a
restarted script resumes where the job says, with no bookkeeping of its own.

Call it on every rank, as often as you like: only rank 0 reports, at most once per
``DDP_PROGRESS_INTERVAL`` seconds (10 by default; the first report of the last step is sent at
once, those after it at the interval like any other), from a
background thread. It never blocks training and never raises: with the operator down, no
network, or no ``DDP_PROGRESS_URL`` (a run outside a DDPJob), the script runs on as before and
says so once on stderr.

The standard library only, Python 3.9 and later: the operator delivers this file to every worker,
whatever its image (``manifests/helpers_pod.py``; no install). The operator gives each worker pod
the URL (``DDP_PROGRESS_URL``) and a token of the pod's own, bound to it (``DDP_PROGRESS_TOKEN``, a
file): only the job's own pods can report for it.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, NamedTuple

try:  # where each rank stands when the training stops (a copy of this file alone: nothing)
    from .progress_stacks import StackWatch
except ImportError:  # pragma: no cover
    StackWatch = None  # type: ignore[assignment,misc]

URL_ENV = "DDP_PROGRESS_URL"
TOKEN_ENV = "DDP_PROGRESS_TOKEN"
INTERVAL_ENV = "DDP_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 10.0
TIMEOUT = 5.0  # seconds one report may take
MAX_METRICS = 8
PHASE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # as decide/progress_report takes it
MAX_PHASE_SECONDS = 7 * 86400
RESUME_STEP_ENV = "DDP_RESUME_STEP"
RESUME_PATH_ENV = "DDP_RESUME_PATH"
MAX_PATH = 1024  # characters of a checkpoint's path, as decide/progress_report takes it


def rank() -> int:
    """This process's global rank: torch.distributed's once initialised, else RANK, else 0."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # (a broken torch must not stop training)
        pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class Checkpoint(NamedTuple):
    """A checkpoint: the step it holds, and where it is (None: the script did not say)."""

    step: int
    path: str | None


class Reporter:
    """Sends the latest report of this process, rate-limited, from a daemon thread."""

    def __init__(
        self, url: str | None, token_file: str | None, interval: float = DEFAULT_INTERVAL
    ) -> None:
        self.url, self.token_file, self.interval = url, token_file, interval
        self._cond = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._final = False  # the pending report is the first of the last step: sent at once
        self._final_sent = False  # it went: the reports after it wait their interval
        self._urgent = False  # the pending report starts a phase: sent at once
        self._phase: str | None = None  # the phase of the last report queued
        self._told: str | None = None  # the phase of the last report taken to be sent
        self._checkpoint: dict[str, Any] | None = None  # the last one said: in every report
        self._last: tuple[int, Any, str | None, Any, dict[str, Any]] | None = None
        self._sent_at = -math.inf
        self._first: tuple[float, int] | None = None  # (time, step) of this process's first
        self._thread: threading.Thread | None = None
        self._said: set[str] = set()
        self._sending = threading.Lock()  # one report at a time: they arrive in order
        self._busy = False  # the thread has taken a report it has not sent yet
        self.sent = 0  # reports the operator accepted
        self._stacks: Any = None  # this rank's StackWatch, from its first report

    def say_once(self, what: str, message: str) -> None:
        """One line on stderr per kind of trouble: the training output stays readable."""
        if what not in self._said:
            self._said.add(what)
            print(f"ddp progress: {message}; training goes on", file=sys.stderr, flush=True)

    def report(
        self,
        step: int,
        total: int | None = None,
        phase: str | None = None,
        phase_timeout: float | None = None,
        **metrics: Any,
    ) -> None:
        """Queue a report (rank 0 only); the newest replaces one not sent yet. Every rank's
        call tells its StackWatch that it advances."""
        try:
            self._advances()
            if rank() != 0:
                return
            if not self.url:
                self.say_once("url", f"{URL_ENV} is not set (not in a DDPJob): not reported")
                return
            if phase is not None and not isinstance(phase, str):  # a metric of that name
                metrics, phase = {**metrics, "phase": phase}, None
            payload = self._payload(int(step), total, metrics)
            phase = self._phase_name(phase)
            if phase:
                payload["phase"] = phase
                if phase_timeout is not None:
                    bound = math.ceil(float(phase_timeout))
                    payload["phaseTimeoutSeconds"] = min(MAX_PHASE_SECONDS, max(1, bound))
            with self._cond:
                self._last = (int(step), total, phase, phase_timeout, metrics)
                self._pending = payload
                last = total is not None and int(step) >= int(total)
                self._final = last and not self._final_sent
                self._urgent = self._urgent or (bool(phase) and phase != self._told)
                self._phase = phase or None
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="ddp-progress", daemon=True
                    )
                    self._thread.start()
                    atexit.register(self.flush)
                self._cond.notify()
        except Exception as exc:  # (never raise into the training loop)
            self.say_once("report", f"report({step!r}) failed: {exc}")

    def _advances(self) -> None:
        """This rank advances: its StackWatch (started at its first call) is told."""
        if self._stacks is None and self.url and StackWatch is not None:
            self._stacks = StackWatch(rank, self._send_stack)
            self._stacks.start()
        if self._stacks is not None:
            self._stacks.called()

    def _send_stack(self, payload: dict[str, Any]) -> bool:
        if os.environ.get("DDP_ATTEMPT", "").isdigit():
            payload["attempt"] = int(os.environ["DDP_ATTEMPT"])
        return self._send(payload)

    def checkpoint(self, step: int, path: str | None = None) -> None:
        """Say a checkpoint of ``step`` is saved (at ``path``): sent at once with the last
        report's step, total, phase and metrics, and with every report after it."""
        try:
            if rank() != 0:
                return
            mark: dict[str, Any] = {"step": int(step)}
            if path:
                text = os.fspath(path)
                if len(text) > MAX_PATH:
                    self.say_once("path", f"checkpoint path over {MAX_PATH} characters: left out")
                else:
                    mark["path"] = text
            with self._cond:
                self._checkpoint = mark
                self._urgent = True
                again = self._last or (int(step), None, self._phase, None, {})
            self.report(again[0], again[1], again[2], again[3], **again[4])
        except Exception as exc:  # (never raise into the training loop)
            self.say_once("checkpoint", f"checkpoint({step!r}) failed: {exc}")

    def _phase_name(self, phase: str | None) -> str | None:
        """The phase as the operator takes it (lower case, letters, digits, ``_`` and ``-``,
        32 at most); a name it would refuse is said once and left out, the report still sent."""
        if not phase:
            return None
        name = phase.strip().lower()
        if not PHASE_NAME.match(name):
            self.say_once("phase", f"phase {phase!r} is no phase name ({PHASE_NAME.pattern})")
            return None
        return name

    def _payload(self, step: int, total: Any, metrics: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        if self._first is None or step < self._first[1]:
            self._first = (now, step)  # a new process or a resumed run: the rate starts anew
        payload: dict[str, Any] = {"step": step}
        if total is not None:
            payload["total"] = int(total)
            t0, s0 = self._first
            if step > s0 and now > t0:
                rate = (step - s0) / (now - t0)
                payload["etaSeconds"] = max(0, round((int(total) - step) / rate))
        values = {k: _number(v) for k, v in metrics.items()}
        payload["metrics"] = {k: v for k, v in values.items() if v is not None}
        if len(payload["metrics"]) > MAX_METRICS:
            self.say_once("metrics", f"more than {MAX_METRICS} metrics: the first kept")
            payload["metrics"] = dict(list(payload["metrics"].items())[:MAX_METRICS])
        if self._checkpoint is not None:
            payload["checkpoint"] = dict(self._checkpoint)
        if os.environ.get("DDP_ATTEMPT", "").isdigit():
            payload["attempt"] = int(os.environ["DDP_ATTEMPT"])
        return payload

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                wait = self._sent_at + self.interval - time.monotonic()
                if wait > 0 and not self._final and not self._urgent:
                    self._cond.wait(wait)
                    continue  # a newer report may have come, or the final one
                payload, self._pending = self._pending, None
                self._told = payload.get("phase")
                self._urgent = False
                self._final_sent = self._final_sent or self._final
                self._final = False
                self._sent_at = time.monotonic()
                self._busy = True
            try:
                self._send(payload)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, payload: dict[str, Any]) -> bool:
        with self._sending:
            return self._post(payload)

    def _post(self, payload: dict[str, Any]) -> bool:
        try:
            headers = {"Content-Type": "application/json"}
            if self.token_file:
                with open(self.token_file, encoding="utf-8") as f:
                    headers["Authorization"] = "Bearer " + f.read().strip()
            body = json.dumps(payload).encode()
            request = urllib.request.Request(self.url or "", body, headers, method="POST")
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                response.read()
            self.sent += 1
            return True
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            self.say_once(f"http-{exc.code}", f"the operator refused a report: {exc.code} {detail}")
        except Exception as exc:  # (the operator down, no network: go on)
            self.say_once("send", f"cannot reach the operator at {self.url}: {exc}")
        return False

    def flush(self) -> None:
        """Send a report still waiting now, once, after the one on its way (at exit: the last
        step reaches the job before the interpreter stops the sending thread)."""
        deadline = time.monotonic() + TIMEOUT
        with self._cond:
            while self._busy and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            payload, self._pending = self._pending, None
            self._told = payload.get("phase") if payload is not None else self._told
        if payload is not None:
            self._send(payload)


_reporter: Reporter | None = None


def reporter() -> Reporter:
    """The process's reporter, configured from the environment the operator gives the pod."""
    global _reporter
    if _reporter is None:
        try:
            interval = float(os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL)
        except ValueError:
            interval = DEFAULT_INTERVAL
        _reporter = Reporter(os.environ.get(URL_ENV), os.environ.get(TOKEN_ENV), interval)
    return _reporter


def send_stack(payload: dict[str, Any]) -> bool:
    """Send where this rank stands (``progress_stacks``), with its attempt; False if it did
    not go."""
    return reporter()._send_stack(payload)


def report(
    step: int,
    total: int | None = None,
    phase: str | None = None,
    phase_timeout: float | None = None,
    **metrics: Any,
) -> None:
    """Report training progress: ``step`` of ``total`` and up to 8 numeric metrics (e.g.
    ``loss=0.12, samples_per_s=5400``). Every rank may call it; rank 0's reports count.
    ``phase`` (e.g. ``"checkpoint"``, ``"eval"``): a long stretch without steps begins, allowed
    ``phase_timeout`` seconds (an hour if not given); the next report without one ends it."""
    reporter().report(step, total, phase, phase_timeout, **metrics)


def checkpoint(step: int, path: str | None = None) -> None:
    """Say that a checkpoint of ``step`` is saved, complete (every rank's part), at ``path``
    (a directory or file the next attempt can read; optional). Every rank may call it; rank
    0's counts. The job shows it (``status.checkpoint``) and a restarted group gets it as
    ``DDP_RESUME_STEP`` / ``DDP_RESUME_PATH`` (``last_checkpoint``)."""
    reporter().checkpoint(step, path)


def last_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from: the job's last one when this container started
    (``DDP_RESUME_STEP``, ``DDP_RESUME_PATH``, given by the operator); None in a job that has
    reported none, or outside a DDPJob."""
    step = os.environ.get(RESUME_STEP_ENV, "")
    if not step.isdigit():
        return None
    return Checkpoint(int(step), os.environ.get(RESUME_PATH_ENV) or None)
