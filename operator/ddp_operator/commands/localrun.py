"""`kubectl ddp local`: run a DDPJob's pods as local processes, with the operator's own builders.

Each worker's trainer container becomes a process: its command and args (``$(VAR)`` expanded as
the kubelet does), env and workingDir, with this Python environment's ``bin/`` first on PATH.
The image is not used. Each worker runs in a private mount and UTS namespace (``unshare``) with
its own ``/etc/hosts`` and hostname, so the workers' DNS names resolve (each worker to its own
loopback address) exactly as scripts expect; where namespaces are not available the DNS names in
the env are rewritten to loopback addresses instead, and the run says so. A run whose rendezvous
port is taken here (by another local run, by another program) takes a free one and says so
(``local_port``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ..decide import conditions, reconcile
from ..manifests import builders, worker_env
from ..manifests.worker_env import expand
from ..model.jobspec import JobSpec
from ..model.workers import WorkerPod
from . import local_port


def loopback(index: int) -> str:
    """The loopback address standing for worker ``index`` (127.0.1.1, 127.0.1.2, ...)."""
    return f"127.0.{1 + (index + 1) // 256}.{(index + 1) % 256}"


@dataclass
class WorkerProcess:
    """What runs for one worker pod."""

    index: int
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    warnings: list[str] = field(default_factory=list)


def worker_processes(job: JobSpec, base_env: Mapping[str, str]) -> list[WorkerProcess]:
    """Render the job's pods with the operator's builders and turn each trainer container into
    a process description. ``base_env`` is the environment the container env is laid over."""
    procs = []
    configmaps = worker_env.configmaps(job, 0, builders.worker_hosts(job))  # as the operator's
    for i in range(job.nodes):
        pod = builders.build_worker_pod(job, i)
        spec = pod["spec"]
        container = spec["containers"][builders.trainer_index(spec)]
        env, missing = worker_env.resolve(container, configmaps, base_env)
        warnings = [f"{what}: not supported locally; unset" for what in missing]
        argv = [
            expand(a, env)
            for a in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        if not argv:
            raise ValueError(f"{pod['metadata']['name']}: the trainer container has no command")
        procs.append(
            WorkerProcess(
                i, pod["metadata"]["name"], argv, env, container.get("workingDir"), warnings
            )
        )
    return procs


def hosts_file(job: JobSpec) -> str:
    """An /etc/hosts naming every worker as its pod would be named in the cluster."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    for i in range(job.nodes):
        name = builders.worker_name(job, i)
        host = builders.worker_host(job, i)
        lines.append(f"{loopback(i)} {host} {host}.{job.namespace}.svc {name}")
    return "\n".join(lines) + "\n"


def rewrite_hosts(proc: WorkerProcess, job: JobSpec) -> None:
    """Fallback without namespaces: replace the workers' DNS names by their loopback addresses."""
    names = {builders.worker_host(job, i): loopback(i) for i in range(job.nodes)}
    for key, value in proc.env.items():
        for host, addr in names.items():
            value = value.replace(host, addr)
        proc.env[key] = value
    proc.argv = [_replace_all(a, names) for a in proc.argv]


def _replace_all(text: str, names: Mapping[str, str]) -> str:
    for host, addr in names.items():
        text = text.replace(host, addr)
    return text


def isolation_argv(hosts: Path, hostname: str) -> list[str]:
    """argv prefix that runs a command with its own /etc/hosts and hostname (``unshare``)."""
    flags = ["--mount", "--uts"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    script = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'
    return ["unshare", *flags, "sh", "-c", script, str(hosts), hostname]


def isolation_works(hosts: Path) -> bool:
    """Whether this kernel and user can run ``isolation_argv``."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run([*isolation_argv(hosts, "probe"), "true"], capture_output=True)
    return probe.returncode == 0


@dataclass
class Outcome:
    """How a local run ended."""

    succeeded: bool
    message: str
    exit_codes: dict[int, int | None]

    @property
    def exit_status(self) -> int:
        """0 on success, else the first failed worker's exit code (1 if it has none)."""
        if self.succeeded:
            return 0
        codes = [c for c in self.exit_codes.values() if c is not None and 0 < c < 256]
        return codes[0] if codes else 1


class LocalRun:
    """Runs a job's workers as local processes until the operator's rules say it has ended."""

    def __init__(self, job: JobSpec, out: IO[str] = sys.stdout, grace: float = 5.0):
        self.job = job
        self.out = out
        self.grace = grace
        self.procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def say(self, line: str) -> None:
        with self._lock:
            self.out.write(line + "\n")
            self.out.flush()

    def start(self, specs: Sequence[WorkerProcess], hosts: Path | None) -> None:
        """Start every worker; with ``hosts``, each in its own namespaces using that file."""
        for spec in specs:
            prefix = isolation_argv(hosts, spec.name) if hosts else []
            argv = [*prefix, *spec.argv]
            proc = subprocess.Popen(
                argv,
                env=spec.env,
                cwd=spec.cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
            self.procs.append(proc)
            threading.Thread(target=self._pump, args=(spec.index, proc), daemon=True).start()

    def _pump(self, index: int, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.say(f"worker-{index} | {line.rstrip()}")

    def stop_all(self) -> None:
        """SIGTERM every worker's process group, SIGKILL what is left after the grace period."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.procs if p.poll() is None]
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + self.grace
            while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
                time.sleep(0.05)

    def observed(self) -> list[WorkerPod]:
        """The workers as the operator would see their pods."""
        pods = []
        for i, p in enumerate(self.procs):
            code = p.poll()
            phase = "Running" if code is None else ("Succeeded" if code == 0 else "Failed")
            name = builders.worker_name(self.job, i)
            pods.append(WorkerPod(name, i, 0, phase, exit_code=code, owner_uid=self.job.uid))
        return pods

    def wait(self) -> Outcome:
        """Wait until the operator's own rules call the job Succeeded or Failed."""
        # One attempt only: locally a failure ends the run instead of restarting the group.
        rules = JobSpec(**{**self.job.__dict__, "backoff_limit": 0})
        status: dict[str, Any] = {}
        while True:
            plan = reconcile.plan(rules, status, self.observed(), datetime.now(UTC))
            status.update(plan.status)
            if plan.finished:
                break
            time.sleep(0.1)
        cond = conditions.condition(status["conditions"], status["phase"])
        codes = {i: p.poll() for i, p in enumerate(self.procs)}  # before stopping the rest
        self.stop_all()
        return Outcome(status["phase"] == "Succeeded", (cond or {}).get("message", ""), codes)


def run(
    job: JobSpec,
    out: IO[str] = sys.stdout,
    base_env: Mapping[str, str] | None = None,
    started: Callable[[LocalRun], None] | None = None,
) -> Outcome:
    """Run the job locally; Ctrl-C stops every worker. ``started`` is given the run once its
    workers started (the SDK's local backend stops it with ``stop_all``)."""
    env = dict(os.environ if base_env is None else base_env)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    with local_port.reserved(job) as (job, moved):
        return _run(job, out, env, moved, started)


def _run(
    job: JobSpec,
    out: IO[str],
    env: dict[str, str],
    moved: str | None,
    started: Callable[[LocalRun], None] | None,
) -> Outcome:
    specs = worker_processes(job, env)
    runner = LocalRun(job, out)
    if moved:
        runner.say(moved)
    for spec in specs:
        for w in spec.warnings:
            runner.say(f"worker-{spec.index} | warning: {w}")
    with tempfile.TemporaryDirectory(prefix="ddp-local-") as tmp:
        hosts = Path(tmp) / "hosts"
        hosts.write_text(hosts_file(job))
        isolated = isolation_works(hosts)
        if not isolated:
            runner.say(
                "warning: cannot create mount/UTS namespaces here; worker DNS names in env and "
                "args are rewritten to loopback addresses (scripts that build names themselves "
                "will not resolve them)"
            )
            for spec in specs:
                rewrite_hosts(spec, job)
        previous = signal.getsignal(signal.SIGINT)

        def interrupted(signum: int, frame: Any) -> None:
            runner.stop_all()
            raise KeyboardInterrupt

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, interrupted)
            signal.signal(signal.SIGTERM, interrupted)
        try:
            runner.start(specs, hosts if isolated else None)
            if started is not None:
                started(runner)
            return runner.wait()
        finally:
            runner.stop_all()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
