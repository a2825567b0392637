"""How the operator talks to the API server (``Transport``): one request at a time through the
official client's REST layer, in a bounded thread pool so that a job's pods are created
concurrently without blocking kopf's event loop; bodies go out and come back as plain JSON, no
model classes, which keeps the client's CPU and memory cost low. The calls themselves: ``kube``.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

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


def resource_path(template: str, *name: str, **params: str) -> str:
    """A resource path, its parts quoted; ``name`` adds the object's own segment."""
    path = template.format(**{k: quote(v, safe="") for k, v in params.items()})
    return path + "".join(f"/{quote(n, safe='')}" for n in name)


def pods_path(namespace: str) -> str:
    """The path of the pods of a namespace, or of every namespace's if it is empty."""
    return resource_path(CORE, namespace=namespace, plural="pods") if namespace else "/api/v1/pods"


def objects_path(api: tuple[str, str, str], namespace: str, *name: str) -> str:
    """The path of a resource (``api``: group, "" for the core API, version, plural) in a
    namespace (in every namespace if empty), or of one object of it (``name``)."""
    group, version, plural = api
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if not namespace:
        return f"{base}/{plural}"
    return resource_path(base + "/namespaces/{namespace}/" + plural, *name, namespace=namespace)


class Transport:
    """Asynchronous requests through the official client's REST layer. It skips the generated
    API classes: their module costs 21 MB of memory to import and their argument validation and
    serialisation most of the client's CPU (bench/README.md)."""

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
        headers, url = self._prepared(method, path, body, content_type, query)
        response = self.api.rest_client.request(
            method, url, headers=headers, body=body, _request_timeout=timeout
        )
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException(http_resp=response.response)
        return response

    def _prepared(
        self, method: str, path: str, body: Any, content_type: str, query: str
    ) -> tuple[dict[str, str], str]:
        """A request's headers (with the credentials) and URL."""
        headers = {**self.api.default_headers, "Accept": JSON, "Content-Type": content_type}
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        return headers, self.api.configuration.host + path + (f"?{query}" if query else "")

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        query: str = "",
        timeout: tuple[float, float] | None = None,
        once: bool = False,
    ) -> bytes:
        """One blocking request; its response body, or ApiException for a status not 2xx.
        ``once``: a GET its caller bounds by ``timeout``: one try, none of the client's retries
        (each would take the timeout again)."""
        if not once:  # read whole: the connection goes back to the pool
            return self.open(method, path, body, content_type, query, timeout).read()
        headers, url = self._prepared(method, path, None, content_type, query)
        pool = self.api.rest_client.pool_manager  # urllib3's: a number bounds each phase
        bound = max(timeout) if timeout else None
        raw = pool.request(method, url, headers=headers, timeout=bound, retries=False)
        if not 200 <= raw.status <= 299:
            raise ApiException(http_resp=raw)
        return raw.data

    async def _call(
        self,
        verb: str,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = JSON,
        query: str = "",
        expected: tuple[int, ...] = (NOT_FOUND, CONFLICT),
        timeout: tuple[float, float] | None = None,
        once: bool = False,
    ) -> bytes:
        loop = asyncio.get_running_loop()
        call = functools.partial(
            self._request, method, path, body, content_type, query, timeout, once
        )
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
        path = resource_path(template, namespace=manifest["metadata"]["namespace"], **params)
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
        path = resource_path(CORE, name, namespace=namespace, plural="pods")
        try:
            await self._call(verb, method, path, body, content_type)
        except ApiException as exc:
            if exc.status in gone:
                return False
            raise
        return True

    async def _read(self, verb: str, path: str) -> dict[str, Any] | None:
        """The object at ``path`` as the API server's JSON; None if there is none."""
        try:
            data = await self._call(verb, "GET", path, expected=(NOT_FOUND,))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        return json.loads(data)
