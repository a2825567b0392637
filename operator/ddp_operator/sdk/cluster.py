"""The SDK's cluster client (``Client``) and its errors."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from ..decide import presence
from ..model import constants as c
from ..model.jobspec import SpecError, resolve
from .manifest import job_manifest

FINISHED = ("Succeeded", "Failed")


class SDKError(Exception):
    """A call the cluster (or the local runner) refused; the message is the API's, ``status``
    its HTTP status (404: not found) where it has one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class JobFailed(SDKError):
    """The job ended Failed while it was awaited; the message is its Failed condition's, and
    ``first_failure`` the job's ``status.firstFailure`` (the worker that failed first, its exit
    code or reason, its last lines), if it names one."""

    def __init__(self, message: str, first_failure: dict[str, Any] | None = None):
        super().__init__(message)
        self.first_failure = first_failure or {}


class Client:
    """DDPJobs on a cluster: the kubeconfig's (KUBECONFIG, or ``kubeconfig``), else in-cluster.

    As a context manager (``with Client() as client:``) it deletes, on the way out, the jobs it
    submitted and has not deleted, finished or not, so that a failure or a timeout in the block
    leaves nothing running; used alone, the jobs stay until deleted.

    A cluster without the DDPJob CRD is an SDKError that says so; ``wait``'s TimeoutError says
    when no operator has picked the job up ``pickup_window`` seconds (``DDP_PICKUP_WINDOW``,
    else 30) after its creation.
    """

    # The DDPJob resource asked for: (group, version, plural); a test points it at one the
    # cluster does not serve, to see what a cluster without the CRD answers.
    resource: tuple[str, str, str] = (c.GROUP, c.VERSION, c.PLURAL)

    def __init__(
        self,
        namespace: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        from kubernetes import client, config

        try:
            self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = next((x for x in contexts if x.get("name") == context), active) or {}
            ns = (chosen.get("context") or {}).get("namespace")
        except config.ConfigException:
            config.load_incluster_config()
            self.api, ns = client.ApiClient(), None
        self.namespace = namespace or ns or "default"
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.submitted: list[str] = []  # what ``close`` (the end of a with block) deletes
        self.pickup_window = presence.window(os.environ)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Delete the jobs this client submitted and has not deleted (gone already: fine), then
        close its connections; SDKError naming those it could not delete."""
        kept = []
        for name in list(self.submitted):
            try:
                self.delete(name)
            except SDKError as exc:
                if exc.status != 404:
                    kept.append(f"{name} ({exc})")
        self.submitted.clear()
        self.api.close()
        if kept:
            raise SDKError(f"could not delete ddpjobs {', '.join(kept)}")

    def _call(
        self, what: str, fn: Callable[..., Any], *args: Any, ddpjobs: bool = False, **kw: Any
    ) -> Any:
        """``fn(*args, **kw)``; an API error as SDKError, and one that says the cluster does
        not serve DDPJobs (a call on them: ``ddpjobs``) as the line that says so."""
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kw)
        except ApiException as exc:
            if ddpjobs and presence.crd_missing(exc.status, exc.body):
                raise SDKError(presence.NO_CRD, exc.status) from exc
            try:
                message = json.loads(exc.body or "{}").get("message") or exc.reason
            except ValueError:
                message = exc.body or exc.reason
            raise SDKError(f"{what}: {exc.status} {message}", exc.status) from exc

    def _jobs(self, fn: str, *args: Any, **kw: Any) -> Any:
        call, (group, version, plural) = getattr(self.custom, fn), self.resource
        where = (group, version, self.namespace, plural)
        return self._call(fn, call, *where, *args, ddpjobs=True, **kw)

    def submit(self, manifest: Mapping[str, Any]) -> str:
        """Create the DDPJob of a manifest (checked here first); its name."""
        job = {**manifest, "metadata": {**manifest.get("metadata", {})}}
        job["metadata"]["namespace"] = job["metadata"].get("namespace") or self.namespace
        try:
            resolve({**job, "metadata": {**job["metadata"], "uid": "check"}})
        except SpecError as exc:
            raise SDKError(f"not a valid DDPJob: {exc}") from exc
        made = self._jobs("create_namespaced_custom_object", job)
        self.submitted.append(made["metadata"]["name"])
        return made["metadata"]["name"]

    def job_manifest(self, entry: str | Callable[[], Any], **kwargs: Any) -> dict[str, Any]:
        """The DDPJob ``train(entry, **kwargs)`` would submit (``sdk.job_manifest``), to change
        and ``submit``, or to keep."""
        return job_manifest(entry, **kwargs)

    def train(self, entry: str | Callable[[], Any], **kwargs: Any) -> str:
        """Submit ``job_manifest(entry, **kwargs)``: a script or a function on every worker."""
        return self.submit(self.job_manifest(entry, **kwargs))

    def list(self) -> list[dict[str, Any]]:
        """The namespace's DDPJobs."""
        return self._jobs("list_namespaced_custom_object")["items"]

    def get(self, name: str) -> dict[str, Any]:
        """One DDPJob, as the API server has it."""
        return self._jobs("get_namespaced_custom_object", name)

    def phase(self, name: str) -> str:
        return (self.get(name).get("status") or {}).get("phase") or "Pending"

    def progress(self, name: str) -> dict[str, Any] | None:
        """The training's last report (``status.progress``), or None before the first."""
        return (self.get(name).get("status") or {}).get("progress")

    def wait(
        self, name: str, phase: str = "Succeeded", timeout: float = 600, poll: float = 1.0
    ) -> dict[str, Any]:
        """The job once in ``phase``; JobFailed if it ends otherwise, TimeoutError after
        ``timeout`` seconds (saying so if no operator has picked the job up)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(name)
            status = job.get("status") or {}
            now = status.get("phase") or "Pending"
            if now == phase:
                return job
            if now in FINISHED:
                failed = next((x for x in status.get("conditions") or [] if x["type"] == now), {})
                raise JobFailed(
                    f"ddpjob {name} ended {now}: {failed.get('message', '')}",
                    status.get("firstFailure"),
                )
            if time.monotonic() > deadline:
                said = f"ddpjob {name} is {now}, not {phase}, after {timeout} s"
                unheard = presence.unheard(job, datetime.now(UTC), self.pickup_window)
                raise TimeoutError(f"{said}: {unheard}" if unheard else said)
            time.sleep(poll)

    def _pods(self, name: str, worker: int | None) -> list[tuple[int, str]]:
        """(index, pod name) of the job's workers, or of one, by index."""
        found = self._call(
            "list pods",
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{c.LABEL_JOB}={name}",
        ).items
        pods = sorted(
            (int(p.metadata.labels.get(c.LABEL_INDEX, 0)), p.metadata.name) for p in found
        )
        return [(i, pod) for i, pod in pods if worker is None or i == worker]

    def stream(self, name: str, worker: int | None = None) -> Iterator[str]:
        """The trainer logs as they come, line by line (of every worker, ``worker-<i> | `` in
        front, or of one), until every worker's trainer has ended."""
        lines: queue.Queue[str | None] = queue.Queue()
        pods = self._pods(name, worker)

        def follow(index: int, pod: str) -> None:
            prefix = "" if worker is not None else f"worker-{index} | "
            try:
                resp = self._call(
                    "follow log",
                    self.core.read_namespaced_pod_log,
                    pod,
                    self.namespace,
                    container=c.TRAINER_CONTAINER,
                    follow=True,
                    _preload_content=False,
                )
                for raw in resp:
                    for line in raw.decode(errors="replace").splitlines():
                        lines.put(prefix + line)
            except SDKError as exc:
                lines.put(f"{prefix}(log unavailable: {exc})")
            finally:
                lines.put(None)

        for index, pod in pods:
            threading.Thread(target=follow, args=(index, pod), daemon=True).start()
        ended = 0
        while ended < len(pods):
            line = lines.get()
            if line is None:
                ended += 1
            else:
                yield line

    def logs(self, name: str, worker: int | None = None) -> str:
        """The trainer's log of one worker, or of every worker with ``worker-<i> | `` in front
        (``stream`` follows them as they come)."""
        out = []
        for index, pod in self._pods(name, worker):
            text = self._call(
                "read log",
                self.core.read_namespaced_pod_log,
                pod,
                self.namespace,
                container=c.TRAINER_CONTAINER,
            )
            prefix = "" if worker is not None else f"worker-{index} | "
            out += [prefix + line for line in text.splitlines()]
        return "\n".join(out)

    def _suspend(self, name: str, suspend: bool) -> None:
        self._jobs("patch_namespaced_custom_object", name, {"spec": {"suspend": suspend}})

    def suspend(self, name: str) -> None:
        """Stop the job's workers, keeping the job (``spec.suspend``)."""
        self._suspend(name, True)

    def resume(self, name: str) -> None:
        """Start a suspended job's workers again."""
        self._suspend(name, False)

    def delete(self, name: str) -> None:
        """Delete the job; its pods, Service and ConfigMaps go with it."""
        self._jobs("delete_namespaced_custom_object", name)
        if name in self.submitted:
            self.submitted.remove(name)
