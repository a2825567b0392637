"""The SDK's cluster client (``Client``), its errors and the job a ``train`` call submits."""

from __future__ import annotations

import inspect
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..model import constants as c
from ..model.jobspec import SpecError, resolve

FINISHED = ("Succeeded", "Failed")


class SDKError(Exception):
    """A call the cluster (or the local runner) refused; the message is the API's."""


class JobFailed(SDKError):
    """The job ended Failed while it was awaited; the message is its Failed condition's."""


def job_manifest(
    entry: str | Callable[[], Any],
    *,
    image: str,
    nodes: int = 2,
    procs_per_node: int = 1,
    name: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    backend: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A DDPJob that runs ``entry`` under torchrun on every worker: a script path in the image,
    or a function (its source is shipped in the job; it must import what it uses)."""
    if callable(entry):
        source = inspect.getsource(entry) + f"\n{entry.__name__}()\n"
        command = ["torchrun", "--no-python", "python", "-c", source, *args]
        default = entry.__name__.replace("_", "-").lower()
    else:
        command = ["torchrun", entry, *args]
        default = entry.rsplit("/", 1)[-1].removesuffix(".py").replace("_", "-").lower()
    trainer: dict[str, Any] = {"name": c.TRAINER_CONTAINER, "image": image, "args": command}
    if env:
        trainer["env"] = [{"name": k, "value": v} for k, v in env.items()]
    body: dict[str, Any] = {"nodes": nodes, "procsPerNode": procs_per_node, **spec}
    body.setdefault("template", {"spec": {"containers": [trainer]}})
    if backend:
        body["backend"] = backend
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name or f"{default}-{uuid.uuid4().hex[:5]}"},
        "spec": body,
    }


class Client:
    """DDPJobs on a cluster: the kubeconfig's (KUBECONFIG, or ``kubeconfig``), else in-cluster."""

    def __init__(
        self,
        namespace: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> None:
        from kubernetes import client, config

        try:
            self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            ns = (active or {}).get("context", {}).get("namespace")
        except config.ConfigException:
            config.load_incluster_config()
            self.api, ns = client.ApiClient(), None
        self.namespace = namespace or ns or "default"
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kw)
        except ApiException as exc:
            try:
                message = json.loads(exc.body or "{}").get("message") or exc.reason
            except ValueError:
                message = exc.body or exc.reason
            raise SDKError(f"{what}: {exc.status} {message}") from exc

    def _jobs(self, fn: str, *args: Any, **kw: Any) -> Any:
        call = getattr(self.custom, fn)
        return self._call(fn, call, c.GROUP, c.VERSION, self.namespace, c.PLURAL, *args, **kw)

    def submit(self, manifest: Mapping[str, Any]) -> str:
        """Create the DDPJob of a manifest (checked here first); its name."""
        job = {**manifest, "metadata": {**manifest.get("metadata", {})}}
        job["metadata"]["namespace"] = job["metadata"].get("namespace") or self.namespace
        try:
            resolve({**job, "metadata": {**job["metadata"], "uid": "check"}})
        except SpecError as exc:
            raise SDKError(f"not a valid DDPJob: {exc}") from exc
        made = self._jobs("create_namespaced_custom_object", job)
        return made["metadata"]["name"]

    def train(self, entry: str | Callable[[], Any], **kwargs: Any) -> str:
        """Submit ``job_manifest(entry, **kwargs)``: a script or a function on every worker."""
        return self.submit(job_manifest(entry, **kwargs))

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
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(name)
            status = job.get("status") or {}
            now = status.get("phase") or "Pending"
            if now == phase:
                return job
            if now in FINISHED:
                failed = next((x for x in status.get("conditions") or [] if x["type"] == now), {})
                raise JobFailed(f"ddpjob {name} ended {now}: {failed.get('message', '')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ddpjob {name} is {now}, not {phase}, after {timeout} s")
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
        """Delete the job; its pods, Service and ConfigMap go with it."""
        self._jobs("delete_namespaced_custom_object", name)
