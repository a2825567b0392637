"""The SDK's local backend: the calls of ``Client``, the job's workers run as processes of this
machine by ``kubectl ddp local``'s runner (this Python environment, not the image). Progress
reports go to an endpoint of this process on the loopback."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from ..commands import localrun
from ..decide import progress_report
from ..decide.conditions import format_time
from ..model.jobspec import SpecError, resolve
from ..progress import URL_ENV
from .cluster import FINISHED, JobFailed, SDKError
from .manifest import job_manifest


class _Job:
    """One local job: its manifest, its run's thread, output and outcome."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest
        self.created = format_time(datetime.now(UTC))
        self.lines: list[str] = []
        self.phase = "Pending"
        self.message = ""
        self.progress: dict[str, Any] | None = None
        self.run: localrun.LocalRun | None = None
        self.thread: threading.Thread | None = None
        self.restarts = -1

    def write(self, text: str) -> None:  # the run's output, line by line
        self.lines += [line for line in text.splitlines() if line]

    def flush(self) -> None:
        pass


class LocalClient:
    """DDPJobs as local processes: submit, list, get, wait, logs, progress, suspend, resume and
    delete as with ``Client``; ``image`` is not used, ``namespace`` only names the jobs'. The
    workers run this Python environment (it needs torch) in the current directory. As a context
    manager it stops and forgets every job on the way out, as ``close`` does."""

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self._jobs: dict[str, _Job] = {}
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every job's processes, forget the jobs and stop the progress endpoint."""
        for name in list(self._jobs):
            self.delete(name)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _endpoint(self) -> str:
        if self._server is None:
            jobs = self._jobs

            class Reports(BaseHTTPRequestHandler):
                def do_POST(self) -> None:
                    name = self.path.rstrip("/").split("/")[-2]
                    size = int(self.headers.get("Content-Length") or 0)
                    try:
                        report = json.loads(self.rfile.read(size))
                        jobs[name].progress = progress_report.normalize(report, datetime.now(UTC))
                        self.send_response(202)
                    except (KeyError, ValueError):
                        self.send_response(400)
                    self.end_headers()

                def log_message(self, *args: Any) -> None:
                    pass

            self._server = ThreadingHTTPServer(("127.0.0.1", 0), Reports)
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _job(self, name: str) -> _Job:
        if name not in self._jobs:
            raise SDKError(f"get: 404 ddpjobs {name!r} not found", 404)
        return self._jobs[name]

    def _start(self, name: str) -> None:
        job = self._jobs[name]
        spec = resolve({**job.manifest, "metadata": {**job.manifest["metadata"], "uid": name}})
        url = f"{self._endpoint()}/v1/namespaces/{self.namespace}/ddpjobs/{name}/progress"
        env = {**os.environ, URL_ENV: url, "DDP_ATTEMPT": str(job.restarts + 1)}
        job.restarts += 1
        job.phase = "Running"
        job.run = None  # this start's run, once it has begun (``_stop`` waits for it)

        def started(run: localrun.LocalRun) -> None:
            job.run = run

        def go() -> None:
            outcome = localrun.run(spec, out=job, base_env=env, started=started)  # type: ignore[arg-type]
            if job.phase == "Running":
                job.phase = "Succeeded" if outcome.succeeded else "Failed"
                job.message = outcome.message

        job.thread = threading.Thread(target=go, name=f"ddpjob-{name}", daemon=True)
        job.thread.start()

    def submit(self, manifest: Mapping[str, Any]) -> str:
        """Run the job's workers here; its name."""
        meta = {**manifest.get("metadata", {}), "namespace": self.namespace}
        body = {**manifest, "metadata": meta}
        try:
            resolve({**body, "metadata": {**meta, "uid": "check"}})
        except SpecError as exc:
            raise SDKError(f"not a valid DDPJob: {exc}") from exc
        name = meta["name"]
        if name in self._jobs:
            raise SDKError(f"create: 409 ddpjobs {name!r} already exists", 409)
        self._jobs[name] = _Job(body)
        if not body.get("spec", {}).get("suspend"):
            self._start(name)
        return name

    def job_manifest(self, entry: str | Callable[[], Any], **kwargs: Any) -> dict[str, Any]:
        """The DDPJob ``train(entry, **kwargs)`` would run (``image`` may be left out)."""
        kwargs.setdefault("image", "local")
        return job_manifest(entry, **kwargs)

    def train(self, entry: str | Callable[[], Any], **kwargs: Any) -> str:
        """Submit ``job_manifest(entry, **kwargs)`` (``image`` may be left out)."""
        return self.submit(self.job_manifest(entry, **kwargs))

    def get(self, name: str) -> dict[str, Any]:
        """The job as a DDPJob object: metadata, spec and a status (phase, restarts, progress)."""
        job = self._job(name)
        status: dict[str, Any] = {"phase": job.phase, "restarts": max(job.restarts, 0)}
        if job.message:
            status["conditions"] = [{"type": job.phase, "status": "True", "message": job.message}]
        if job.progress:
            status["progress"] = job.progress
        meta = {**job.manifest["metadata"], "creationTimestamp": job.created}
        return {**job.manifest, "metadata": meta, "status": status}

    def list(self) -> list[dict[str, Any]]:
        return [self.get(name) for name in self._jobs]

    def phase(self, name: str) -> str:
        return self._job(name).phase

    def progress(self, name: str) -> dict[str, Any] | None:
        return self._job(name).progress

    def wait(
        self, name: str, phase: str = "Succeeded", timeout: float = 600, poll: float = 0.2
    ) -> dict[str, Any]:
        """As ``Client.wait``."""
        deadline = time.monotonic() + timeout
        while (now := self.phase(name)) != phase:
            if now in FINISHED:
                raise JobFailed(f"ddpjob {name} ended {now}: {self._job(name).message}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ddpjob {name} is {now}, not {phase}, after {timeout} s")
            time.sleep(poll)
        return self.get(name)

    def logs(self, name: str, worker: int | None = None) -> str:
        """Every worker's output, ``worker-<i> | `` in front, or one worker's alone."""
        lines = list(self._job(name).lines)
        if worker is None:
            return "\n".join(lines)
        mark = f"worker-{worker} | "
        return "\n".join(x.removeprefix(mark) for x in lines if x.startswith(mark))

    def stream(self, name: str, worker: int | None = None) -> Iterator[str]:
        """As ``logs``, line by line as they come, until the job's processes have ended."""
        job, sent = self._job(name), 0
        mark = f"worker-{worker} | "
        while True:
            running = job.phase in ("Pending", "Running")
            lines = job.lines[sent:]
            sent += len(lines)
            for line in lines:
                if worker is None:
                    yield line
                elif line.startswith(mark):
                    yield line.removeprefix(mark)
            if not running:
                return
            time.sleep(0.1)

    def _stop(self, name: str, phase: str) -> None:
        job = self._job(name)
        if job.phase == "Running":
            job.phase = phase
            while job.run is None and job.thread is not None and job.thread.is_alive():
                time.sleep(0.05)
            if job.run is not None:
                job.run.stop_all()
            if job.thread is not None:
                job.thread.join()
        job.phase = phase

    def suspend(self, name: str) -> None:
        """Stop the job's processes, keeping the job (resume starts them anew)."""
        self._stop(name, "Suspended")

    def resume(self, name: str) -> None:
        """Start a suspended job's workers again (the next attempt, as on a cluster)."""
        if self._job(name).phase == "Suspended":
            self._start(name)

    def delete(self, name: str) -> None:
        """Stop the job's processes and forget it."""
        self._stop(name, "Deleted")
        del self._jobs[name]
