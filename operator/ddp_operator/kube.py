"""The operator's writes to the API server: the only module of the operator that does I/O.

The official client is synchronous; calls run in a bounded thread pool so that a job's pods
are created concurrently without blocking kopf's event loop. Responses of writes are not
deserialised (only their status matters), which keeps the client's CPU cost low.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import constants as c
from . import metrics

CONFLICT = 409
NOT_FOUND = 404
UNPROCESSABLE = 422
Manifest = Mapping[str, Any]


class JobGone(Exception):
    """The DDPJob was deleted (its namespace may be gone too): its loop has nothing left to do."""


def api_client(pool_size: int = 64) -> client.ApiClient:
    """An ApiClient for the in-cluster service account, else the kubeconfig (KUBECONFIG)."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    cfg.retries = 3
    return client.ApiClient(cfg)


def _call_raw(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Call without deserialising the response, and hand the connection back to the pool."""
    response = fn(*args, _preload_content=False, **kwargs)
    response.read()
    response.release_conn()


class NotServed(Exception):
    """The API server does not serve the resource (an API group or CRD that is not installed)."""


class Kube:
    """Asynchronous facade over the official client for the few calls the operator makes."""

    def __init__(self, api: client.ApiClient, concurrency: int = 32):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="kube")

    async def _call(self, verb: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(
                self._pool, functools.partial(_call_raw, fn, *args, **kwargs)
            )
        except ApiException as exc:
            metrics.api_call(verb, exc.status, expected=(NOT_FOUND, CONFLICT))
            raise
        except Exception:
            metrics.api_call(verb, None)
            raise
        metrics.api_call(verb, 200)

    async def _create(
        self, verb: str, fn: Callable[..., Any], manifest: Mapping[str, Any], **kwargs: Any
    ) -> bool:
        try:
            await self._call(verb, fn, manifest["metadata"]["namespace"], manifest, **kwargs)
        except ApiException as exc:
            if exc.status == CONFLICT:
                return False
            raise
        return True

    async def _on_pod(
        self,
        verb: str,
        fn: Callable[..., Any],
        *args: Any,
        gone: tuple[int, ...] = (NOT_FOUND, CONFLICT),
        **kwargs: Any,
    ) -> bool:
        """One call about exactly one pod; False if the pod is gone or was replaced (``gone``)."""
        try:
            await self._call(verb, fn, *args, **kwargs)
        except ApiException as exc:
            if exc.status in gone:
                return False
            raise
        return True

    async def create_service(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Service; False if one of that name exists already."""
        return await self._create("create_service", self.core.create_namespaced_service, manifest)

    async def create_pod(self, manifest: Mapping[str, Any], dry_run: bool = False) -> bool:
        """Create a pod (or only let the API server check it: ``dry_run``); False if one of that
        name exists already."""
        extra = {"dry_run": "All"} if dry_run else {}
        verb = "create_pod_dry_run" if dry_run else "create_pod"
        return await self._create(verb, self.core.create_namespaced_pod, manifest, **extra)

    async def create_object(
        self, group: str, version: str, plural: str, manifest: Manifest
    ) -> bool:
        """Create an object of any API group (a gang's PodGroup); False if one of that name
        exists already, NotServed if the API server does not serve that resource."""

        def create(namespace: str, body: Manifest, **kwargs: Any) -> Any:
            return self.custom.create_namespaced_custom_object(
                group, version, namespace, plural, body, **kwargs
            )

        try:
            return await self._create(f"create_{plural}", create, manifest)
        except ApiException as exc:
            if exc.status == NOT_FOUND and "namespaces" not in (exc.body or ""):
                raise NotServed(
                    f"the API server does not serve {plural}.{group}/{version}"
                ) from exc
            raise

    async def read_metadata(
        self, kind: str, namespace: str, name: str, api: tuple[str, str, str] | None = None
    ) -> dict[str, Any] | None:
        """The metadata of a Service or Pod (or of any object: ``api`` is its group, version and
        plural) as a dict; None if there is none of that name."""
        if api is not None:
            obj = await self.read_object(api, namespace, name)
            return None if obj is None else dict(obj.get("metadata") or {})
        read = {"Service": self.core.read_namespaced_service, "Pod": self.core.read_namespaced_pod}
        found = await self._read(f"read_{kind.lower()}", read[kind], name, namespace)
        return (
            None
            if found is None
            else self.core.api_client.sanitize_for_serialization(found.metadata)
        )

    async def read_object(
        self, api: tuple[str, str, str], namespace: str, name: str
    ) -> dict[str, Any] | None:
        """An object of any API group (``api``: group, version, plural) as a dict; None if
        there is none of that name, or the API server does not serve the resource."""
        group, version, plural = api
        fn = self.custom.get_namespaced_custom_object
        found = await self._read(f"read_{plural}", fn, group, version, namespace, plural, name)
        return None if found is None else dict(found)

    async def _read(self, verb: str, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(self._pool, functools.partial(fn, *args))
        except ApiException as exc:
            metrics.api_call(verb, exc.status, expected=(NOT_FOUND,))
            if exc.status == NOT_FOUND:
                return None
            raise
        metrics.api_call(verb, 200)
        return found

    async def delete_pod(
        self, namespace: str, name: str, uid: str | None, force: bool = False
    ) -> bool:
        """Delete exactly this pod (UID precondition), at once without waiting for its kubelet if
        ``force``; False if it is gone or was replaced."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if force:
            body["gracePeriodSeconds"] = 0
        verb = "force_delete_pod" if force else "delete_pod"
        return await self._on_pod(verb, self.core.delete_namespaced_pod, name, namespace, body=body)

    async def annotate_pod(
        self, namespace: str, name: str, uid: str | None, annotations: Mapping[str, str]
    ) -> bool:
        """Add annotations to exactly this pod (its UID in the patch is a precondition); False if
        it is gone or was replaced."""
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid
        patch = {"metadata": meta}
        return await self._on_pod(
            "annotate_pod", self.core.patch_namespaced_pod, name, namespace, patch
        )

    async def remove_finalizer(
        self, namespace: str, name: str, uid: str | None, finalizers: Sequence[str], drop: str
    ) -> bool:
        """Take finalizer ``drop`` off exactly this pod, as last seen with ``finalizers`` (the
        patch tests the pod's UID and the finalizer's place first); False if the pod is gone,
        was replaced or changed meanwhile (the next pass sees it anew)."""
        at = list(finalizers).index(drop)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": f"/metadata/finalizers/{at}", "value": drop},
            {"op": "remove", "path": f"/metadata/finalizers/{at}"},
        ]
        if uid:
            ops.insert(0, {"op": "test", "path": "/metadata/uid", "value": uid})
        # A failed test (the pod changed meanwhile) is a 422.
        return await self._on_pod(
            "remove_finalizer",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            ops,
            gone=(NOT_FOUND, CONFLICT, UNPROCESSABLE),
        )

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the DDPJob's status subresource; JobGone if the job no longer exists."""
        try:
            await self._patch_status(namespace, name, status)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                raise JobGone(f"ddpjob {namespace}/{name} no longer exists") from exc
            raise

    async def _patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await self._call(
            "patch_status",
            self.custom.patch_namespaced_custom_object_status,
            c.GROUP,
            c.VERSION,
            namespace,
            c.PLURAL,
            name,
            {"status": dict(status)},
        )

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Delete the DDPJob itself (TTL); its children follow by garbage collection."""
        body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        try:
            await self._call(
                "delete_job",
                self.custom.delete_namespaced_custom_object,
                c.GROUP,
                c.VERSION,
                namespace,
                c.PLURAL,
                name,
                body=body,
            )
        except ApiException as exc:
            if exc.status not in (NOT_FOUND, CONFLICT):
                raise
