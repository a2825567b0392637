"""The operator's requests to the API server, one method each (``Kube``; how they travel:
``transport``): with ``kubewatch`` (its watch of pods), the only modules of the operator that do
I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from kubernetes.client.exceptions import ApiException

from ..decide.failure_logs import LIMIT_BYTES, TAIL_LINES
from ..model import constants as c
from .transport import (
    CONFLICT,
    CORE,
    JOBS,
    JSON_PATCH,
    MERGE_PATCH,
    NOT_FOUND,
    STRATEGIC_PATCH,
    UNPROCESSABLE,
    JobGone,
    Manifest,
    NotServed,
    StatusConflict,
    Transport,
    objects_path,
    pods_path,
    resource_path,
)


class Kube(Transport):
    """The few calls the operator makes, over ``Transport``."""

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
        path = resource_path(CORE, namespace=namespace, plural="events")
        query = urlencode({"fieldSelector": fields, "limit": 500})
        data = await self._call("list_events", "GET", path, query=query, expected=())
        return json.loads(data).get("items") or []

    async def read_log(
        self, namespace: str, name: str, container: str | None, previous: bool, timeout: float
    ) -> tuple[str, bool]:
        """The end of a container's log (its ``previous`` run's): the first LIMIT_BYTES of its
        last TAIL_LINES lines (``failure_logs`` says why), and whether the limit cut it.
        ``timeout``: seconds to connect, and between bytes."""
        query = {"tailLines": TAIL_LINES, "limitBytes": LIMIT_BYTES}
        query |= {"previous": "true"} if previous else {}
        query |= {"container": container} if container else {}
        path = resource_path(CORE, name, "log", namespace=namespace, plural="pods")
        data = await self._call(  # 404, 400: the pod, or that run of its container, is gone
            "read_log",
            "GET",
            path,
            query=urlencode(query),
            expected=(NOT_FOUND, 400),
            timeout=(timeout, timeout),
            once=True,
        )
        return data.decode(errors="replace"), len(data) >= LIMIT_BYTES

    async def create_service(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Service; False if one of that name exists already."""
        return await self._create("create_service", CORE, manifest, plural="services")

    async def read_node(self, name: str) -> dict[str, Any] | None:
        """A Node as a dict; None if there is none of that name."""
        return await self._read("read_node", resource_path("/api/v1/nodes", name))

    async def patch_node(self, name: str, patch: Manifest) -> bool:
        """Merge-patch a Node (its resourceVersion in the patch: a precondition); False if it
        is gone or changed since."""
        return await self._merge("patch_node", resource_path("/api/v1/nodes", name), patch)

    async def create_event(self, manifest: Mapping[str, Any]) -> bool:
        """Create an Event (one on a Node: ``nodewatch``)."""
        return await self._create("create_event", CORE, manifest, plural="events")

    async def create_configmap(self, manifest: Mapping[str, Any]) -> bool:
        """Create a ConfigMap; False if one of that name exists already."""
        return await self._create("create_configmap", CORE, manifest, plural="configmaps")

    async def read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap, data included; None if there is none of that name."""
        path = resource_path(CORE, name, namespace=namespace, plural="configmaps")
        return await self._read("read_configmap", path)

    async def patch_configmap(
        self,
        namespace: str,
        name: str,
        uid: str,
        data: Mapping[str, str],
        version: str | None = None,
    ) -> bool:
        """Merge ``data`` into exactly this ConfigMap (its UID a precondition, and its
        resourceVersion if ``version``: as read); False if it is gone, was replaced or, with
        ``version``, changed since."""
        path = resource_path(CORE, name, namespace=namespace, plural="configmaps")
        meta = {"uid": uid, **({"resourceVersion": version} if version else {})}
        patch = {"metadata": meta, "data": dict(data)}
        try:
            await self._call("patch_configmap", "PATCH", path, patch, MERGE_PATCH)
        except ApiException as exc:
            if exc.status in (NOT_FOUND, CONFLICT):
                return False
            raise
        return True

    async def delete_configmap(self, namespace: str, name: str, uid: str) -> bool:
        """Delete exactly this ConfigMap (UID precondition); False if it is gone or replaced."""
        path = resource_path(CORE, name, namespace=namespace, plural="configmaps")
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
        path = resource_path(CORE, namespace=manifest["metadata"]["namespace"], plural="pods")
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
        return await self._merge(f"patch_{api[2]}", objects_path(api, namespace, name), body)

    async def patch_object_status(
        self, api: tuple[str, str, str], namespace: str, name: str, patch: Manifest
    ) -> bool:
        """Merge-patch the status subresource of an object of any API group (a Workload's);
        False if it is gone, or changed since the resourceVersion the patch names."""
        path = objects_path(api, namespace, name) + "/status"
        return await self._merge(f"patch_{api[2]}_status", path, dict(patch))

    async def _merge(self, verb: str, path: str, body: Manifest) -> bool:
        """A merge patch; False if its object is gone or its precondition failed."""
        try:
            await self._call(verb, "PATCH", path, body, MERGE_PATCH)
        except ApiException as exc:
            if exc.status in (NOT_FOUND, CONFLICT):
                return False
            raise
        return True

    async def read_cluster_object(
        self, api: tuple[str, str, str], name: str
    ) -> dict[str, Any] | None:
        """A cluster-scoped object (a Kueue ResourceFlavor) as a dict; None if there is none."""
        group, version, plural = api
        return await self._read(
            f"read_{plural}", resource_path(f"/apis/{group}/{version}/{plural}", name)
        )

    async def read_metadata(
        self, kind: str, namespace: str, name: str, api: tuple[str, str, str] | None = None
    ) -> dict[str, Any] | None:
        """The metadata of a Service, Pod or ConfigMap (or of any object: ``api`` is its group,
        version and plural) as a dict; None if there is none of that name."""
        if api is not None:
            obj = await self.read_object(api, namespace, name)
        else:
            plural = {"Service": "services", "Pod": "pods", "ConfigMap": "configmaps"}[kind]
            path = resource_path(CORE, name, namespace=namespace, plural=plural)
            obj = await self._read(f"read_{kind.lower()}", path)
        return None if obj is None else dict(obj.get("metadata") or {})

    async def read_object(
        self, api: tuple[str, str, str], namespace: str, name: str
    ) -> dict[str, Any] | None:
        """An object of any API group (``api``: group, version, plural) as a dict; None if
        there is none of that name, or the API server does not serve the resource."""
        group, version, plural = api
        template = f"/apis/{group}/{version}/namespaces/{{namespace}}/{plural}"
        return await self._read(
            f"read_{plural}", resource_path(template, name, namespace=namespace)
        )

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
        path = resource_path(JOBS, name, namespace=namespace) + "/status"
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
            data = await self._call(
                "get_job", "GET", resource_path(JOBS, name, namespace=namespace)
            )
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
            await self._call(
                "delete_job", "DELETE", resource_path(JOBS, name, namespace=namespace), body
            )
        except ApiException as exc:
            if exc.status not in (NOT_FOUND, CONFLICT):
                raise
