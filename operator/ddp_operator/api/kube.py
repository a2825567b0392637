"""The operator's requests to the API server: with `kubewatch` (its watch of pods), the only
module of the operator that does I/O.

The official client's REST layer is synchronous; calls run in a bounded thread pool so that a
job's pods are created concurrently without blocking kopf's event loop. Bodies go out and come
back as plain JSON: no model classes, which keeps the client's CPU and memory cost low.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ..model import constants as c
from . import metrics

CONFLICT = 409
NOT_FOUND = 404
UNPROCESSABLE = 422
Manifest = Mapping[str, Any]


class JobGone(Exception):
    """The DDPJob was deleted (its namespace may be gone too): its loop has nothing left to do."""


class StatusConflict(Exception):
    """The DDPJob changed since the version a status write was decided from (another replica,
    or a user, wrote it meanwhile): the write did not happen."""


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


class NotServed(Exception):
    """The API server does not serve the resource (an API group or CRD that is not installed)."""


JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CORE = "/api/v1/namespaces/{namespace}/{plural}"
JOBS = f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{{namespace}}/{c.PLURAL}"


def _path(template: str, *name: str, **params: str) -> str:
    """A resource path, its parts quoted; ``name`` adds the object's own segment."""
    path = template.format(**{k: quote(v, safe="") for k, v in params.items()})
    return path + "".join(f"/{quote(n, safe='')}" for n in name)


def pods_path(namespace: str) -> str:
    """The path of the pods of a namespace, or of every namespace's if it is empty."""
    return _path(CORE, namespace=namespace, plural="pods") if namespace else "/api/v1/pods"


def objects_path(api: tuple[str, str, str], namespace: str, *name: str) -> str:
    """The path of a resource (``api``: group, "" for the core API, version, plural) in a
    namespace (in every namespace if empty), or of one object of it (``name``)."""
    group, version, plural = api
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if not namespace:
        return f"{base}/{plural}"
    return _path(base + "/namespaces/{namespace}/" + plural, *name, namespace=namespace)


class Kube:
    """Asynchronous facade over the official client's REST layer for the few calls the operator
    makes. It skips the generated API classes: their module costs 21 MB of memory to import and
    their argument validation and serialisation most of the client's CPU (bench/README.md)."""

    def __init__(self, api: client.ApiClient, concurrency: int = 32):
        self.api = api
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="kube")

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        query: str = "",
        timeout: tuple[float, float] | None = None,
    ) -> Any:
        """Blocking: send one request; its response (RESTResponse) for the caller to read, or
        ApiException for a status not 2xx. ``timeout``: (connect, read) seconds."""
        headers = {**self.api.default_headers, "Accept": JSON, "Content-Type": content_type}
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        url = self.api.configuration.host + path + (f"?{query}" if query else "")
        response = self.api.rest_client.request(
            method, url, headers=headers, body=body, _request_timeout=timeout
        )
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException(http_resp=response.response)
        return response

    def _request(
        self, method: str, path: str, body: Any = None, content_type: str = JSON, query: str = ""
    ) -> bytes:
        """One blocking request; its response body, or ApiException for a status not 2xx."""
        # Read whole: the connection goes back to the pool.
        return self.open(method, path, body, content_type, query).read()

    async def _call(
        self,
        verb: str,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        query: str = "",
        expected: tuple[int, ...] = (NOT_FOUND, CONFLICT),
    ) -> bytes:
        loop = asyncio.get_running_loop()
        call = functools.partial(self._request, method, path, body, content_type, query)
        try:
            data = await loop.run_in_executor(self._pool, call)
        except ApiException as exc:
            metrics.api_call(verb, exc.status, expected=expected)
            raise
        except Exception:
            metrics.api_call(verb, None)
            raise
        metrics.api_call(verb, 200)
        return data

    async def _create(
        self, verb: str, template: str, manifest: Mapping[str, Any], query: str = "", **params: str
    ) -> bool:
        path = _path(template, namespace=manifest["metadata"]["namespace"], **params)
        try:
            await self._call(verb, "POST", path, manifest, query=query)
        except ApiException as exc:
            if exc.status == CONFLICT:
                return False
            raise
        return True

    async def _on_pod(
        self,
        verb: str,
        method: str,
        namespace: str,
        name: str,
        body: Any,
        content_type: str = JSON,
        gone: tuple[int, ...] = (NOT_FOUND, CONFLICT),
    ) -> bool:
        """One call about exactly one pod; False if the pod is gone or was replaced (``gone``)."""
        path = _path(CORE, name, namespace=namespace, plural="pods")
        try:
            await self._call(verb, method, path, body, content_type)
        except ApiException as exc:
            if exc.status in gone:
                return False
            raise
        return True

    async def list_pods(self, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
        """The pods matching the label ``selector`` in ``namespace`` (every namespace if empty),
        read in pages, and the resource version to watch from."""
        return await self.list_objects("list_pods", pods_path(namespace), selector)

    async def list_objects(
        self, verb: str, path: str, selector: str
    ) -> tuple[list[dict[str, Any]], str]:
        """The objects at ``path`` matching the label ``selector``, read in pages, and the
        resource version to watch from."""
        items: list[dict[str, Any]] = []
        page = ""
        while True:
            query = urlencode({"labelSelector": selector, "limit": 500, "continue": page})
            data = json.loads(await self._call(verb, "GET", path, query=query, expected=()))
            items += data.get("items") or []
            page = data["metadata"].get("continue") or ""
            if not page:
                return items, data["metadata"]["resourceVersion"]

    async def list_events(self, namespace: str, fields: str) -> list[dict[str, Any]]:
        """The Events of a namespace matching the field selector ``fields`` (one page of 500)."""
        path = _path(CORE, namespace=namespace, plural="events")
        query = urlencode({"fieldSelector": fields, "limit": 500})
        data = await self._call("list_events", "GET", path, query=query, expected=())
        return json.loads(data).get("items") or []

    async def create_service(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Service; False if one of that name exists already."""
        return await self._create("create_service", CORE, manifest, plural="services")

    async def create_configmap(self, manifest: Mapping[str, Any]) -> bool:
        """Create a ConfigMap; False if one of that name exists already."""
        return await self._create("create_configmap", CORE, manifest, plural="configmaps")

    async def patch_configmap(
        self, namespace: str, name: str, uid: str, data: Mapping[str, str]
    ) -> bool:
        """Merge ``data`` into exactly this ConfigMap (its UID a precondition); False if it is
        gone or was replaced."""
        path = _path(CORE, name, namespace=namespace, plural="configmaps")
        patch = {"metadata": {"uid": uid}, "data": dict(data)}
        try:
            await self._call("patch_configmap", "PATCH", path, patch, MERGE_PATCH)
        except ApiException as exc:
            if exc.status in (NOT_FOUND, CONFLICT):
                return False
            raise
        return True

    async def delete_configmap(self, namespace: str, name: str, uid: str) -> bool:
        """Delete exactly this ConfigMap (UID precondition); False if it is gone or replaced."""
        path = _path(CORE, name, namespace=namespace, plural="configmaps")
        try:
            await self._call("delete_configmap", "DELETE", path, {"preconditions": {"uid": uid}})
        except ApiException as exc:
            if exc.status in (NOT_FOUND, CONFLICT):
                return False
            raise
        return True

    async def create_pod(self, manifest: Mapping[str, Any]) -> bool:
        """Create a pod; False if one of that name exists already."""
        return await self._create("create_pod", CORE, manifest, plural="pods")

    async def dry_run_pod(self, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
        """The pod as the API server would create it (admission and defaults applied, nothing
        stored); None if one of that name exists already."""
        path = _path(CORE, namespace=manifest["metadata"]["namespace"], plural="pods")
        try:
            data = await self._call(
                "create_pod_dry_run", "POST", path, manifest, query="dryRun=All"
            )
        except ApiException as exc:
            if exc.status == CONFLICT:
                return None
            raise
        return json.loads(data)

    async def create_object(
        self, group: str, version: str, plural: str, manifest: Manifest
    ) -> bool:
        """Create an object of any API group (a gang's PodGroup); False if one of that name
        exists already, NotServed if the API server does not serve that resource."""
        template = f"/apis/{group}/{version}/namespaces/{{namespace}}/{plural}"
        try:
            return await self._create(f"create_{plural}", template, manifest)
        except ApiException as exc:
            if exc.status == NOT_FOUND and "namespaces" not in (exc.body or ""):
                raise NotServed(
                    f"the API server does not serve {plural}.{group}/{version}"
                ) from exc
            raise

    async def patch_object(
        self, api: tuple[str, str, str], namespace: str, name: str, uid: str, patch: Manifest
    ) -> bool:
        """Merge-patch exactly this object (its UID a precondition); False if it is gone or
        was replaced."""
        body = {**patch, "metadata": {**(patch.get("metadata") or {}), "uid": uid}}
        path = objects_path(api, namespace, name)
        try:
            await self._call(f"patch_{api[2]}", "PATCH", path, body, MERGE_PATCH)
        except ApiException as exc:
            if exc.status in (NOT_FOUND, CONFLICT):
                return False
            raise
        return True

    async def read_metadata(
        self, kind: str, namespace: str, name: str, api: tuple[str, str, str] | None = None
    ) -> dict[str, Any] | None:
        """The metadata of a Service, Pod or ConfigMap (or of any object: ``api`` is its group,
        version and plural) as a dict; None if there is none of that name."""
        if api is not None:
            obj = await self.read_object(api, namespace, name)
        else:
            plural = {"Service": "services", "Pod": "pods", "ConfigMap": "configmaps"}[kind]
            path = _path(CORE, name, namespace=namespace, plural=plural)
            obj = await self._read(f"read_{kind.lower()}", path)
        return None if obj is None else dict(obj.get("metadata") or {})

    async def read_object(
        self, api: tuple[str, str, str], namespace: str, name: str
    ) -> dict[str, Any] | None:
        """An object of any API group (``api``: group, version, plural) as a dict; None if
        there is none of that name, or the API server does not serve the resource."""
        group, version, plural = api
        template = f"/apis/{group}/{version}/namespaces/{{namespace}}/{plural}"
        return await self._read(f"read_{plural}", _path(template, name, namespace=namespace))

    async def _read(self, verb: str, path: str) -> dict[str, Any] | None:
        """The object at ``path`` as the API server's JSON; None if there is none."""
        try:
            data = await self._call(verb, "GET", path, expected=(NOT_FOUND,))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        return json.loads(data)

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
        return await self._on_pod(verb, "DELETE", namespace, name, body)

    async def annotate_pod(
        self, namespace: str, name: str, uid: str | None, annotations: Mapping[str, str]
    ) -> bool:
        """Add annotations to exactly this pod (its UID in the patch is a precondition); False if
        it is gone or was replaced."""
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid
        patch = {"metadata": meta}
        return await self._on_pod("annotate_pod", "PATCH", namespace, name, patch, STRATEGIC_PATCH)

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
        gone = (NOT_FOUND, CONFLICT, UNPROCESSABLE)
        return await self._on_pod(
            "remove_finalizer", "PATCH", namespace, name, ops, JSON_PATCH, gone
        )

    async def patch_status(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        verb: str = "patch_status",
        version: str | None = None,
    ) -> str | None:
        """Merge-patch the DDPJob's status subresource (counted as ``verb``: the progress desk's
        writes as ``patch_progress``), and only if the job is still at resourceVersion
        ``version``, if given (StatusConflict if not); JobGone if the job no longer exists.
        Returns the job's new resourceVersion."""
        body: dict[str, Any] = {"status": dict(status)}
        if version:
            body["metadata"] = {"resourceVersion": version}
        path = _path(JOBS, name, namespace=namespace) + "/status"
        try:
            data = await self._call(verb, "PATCH", path, body, MERGE_PATCH)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                raise JobGone(f"ddpjob {namespace}/{name} no longer exists") from exc
            if exc.status == CONFLICT and version:
                raise StatusConflict(f"ddpjob {namespace}/{name} changed meanwhile") from exc
            raise
        return (json.loads(data).get("metadata") or {}).get("resourceVersion")

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        """The DDPJob as it is now; JobGone if it no longer exists."""
        try:
            data = await self._call("get_job", "GET", _path(JOBS, name, namespace=namespace))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                raise JobGone(f"ddpjob {namespace}/{name} no longer exists") from exc
            raise
        return json.loads(data)

    async def tell_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None,
        was: str,
        annotations: Mapping[str, str],
    ) -> bool:
        """Set annotations on exactly this pod if its attempt annotation still reads ``was``
        (a replica acting on an older view cannot move a pod's attempt back); False if the pod
        is gone, was replaced or was told meanwhile (the next pass sees it anew)."""
        key = c.ATTEMPT_ANNOTATION.replace("~", "~0").replace("/", "~1")
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": f"/metadata/annotations/{key}", "value": was}
        ]
        if uid:
            ops.insert(0, {"op": "test", "path": "/metadata/uid", "value": uid})
        for k, v in annotations.items():
            escaped = k.replace("~", "~0").replace("/", "~1")
            ops.append({"op": "add", "path": f"/metadata/annotations/{escaped}", "value": v})
        gone = (NOT_FOUND, CONFLICT, UNPROCESSABLE)
        return await self._on_pod("tell_pod", "PATCH", namespace, name, ops, JSON_PATCH, gone)

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Delete the DDPJob itself (TTL); its children follow by garbage collection."""
        body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        try:
            await self._call("delete_job", "DELETE", _path(JOBS, name, namespace=namespace), body)
        except ApiException as exc:
            if exc.status not in (NOT_FOUND, CONFLICT):
                raise
