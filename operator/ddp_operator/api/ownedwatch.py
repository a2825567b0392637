"""The objects the jobs own besides their pods (Services, ConfigMaps, NetworkPolicies, gang
objects), by job: a list, then a watch, of one resource with the operator's job label, in one
namespace (or in all), as ``podwatch`` does for pods.

The registry starts one per resource and namespace once a job there needs it kept
(``decide/owned``). An object deleted, or changed (its labels, spec or data), wakes its job's
loop; one added does not (the loop created it, or finds it on its next pass): a job coming up
costs no pass more than before. No polling: a deletion reaches the loop as the API server's
watch event does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..decide.failures import api_message
from ..model import constants as c
from .kube import Kube
from .kubewatch import WatchExpired, watch
from .podwatch import _call_soon, _end, _in_thread
from .transport import objects_path

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, job)
Name = tuple[str, str]  # (kind, name)
Api = tuple[str, str, str]
MAX_BACKOFF = 30.0
KEPT = ("data", "spec")  # what of an object is kept (with its metadata, less managedFields)


def slim(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """What the index keeps of an object: its kind, metadata (less managedFields), spec or
    data."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {"kind": kind, "metadata": meta, **{k: body[k] for k in KEPT if k in body}}


class OwnedIndex:
    """Owned objects by job (namespace, job label), then by (kind, name); ``changed`` is told of
    every job one of whose objects was deleted or changed."""

    def __init__(self, changed: Callable[[Key], None]) -> None:
        self.changed = changed
        self.by_job: dict[Key, dict[Name, dict[str, Any]]] = {}
        self.where: dict[tuple[str, str, str], Key] = {}  # (namespace, kind, name) -> its job

    def get(self, key: Key) -> dict[Name, dict[str, Any]]:
        return dict(self.by_job.get(key, {}))

    def apply(self, kind: str, events: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Take watch events (type, object) of one kind."""
        for event, body in events:
            obj = slim(kind, body)
            meta = obj["metadata"]
            job = (meta.get("labels") or {}).get(c.LABEL_JOB) or ""
            ns, name = meta.get("namespace") or "", (kind, meta.get("name") or "")
            key = (ns, job)
            former = self.where.pop((ns, *name), None)
            before = self.by_job.get(former, {}).pop(name, None) if former else None
            if former is not None and former != key:  # its job label changed or went
                self.changed(former)
            if event == "DELETED" or not job:
                if former == key:
                    self.changed(key)
                continue
            self.by_job.setdefault(key, {})[name] = obj
            self.where[(ns, *name)] = key
            if before is not None and _content(before) != _content(obj):
                self.changed(key)

    def replace(self, kind: str, namespace: str, items: list[Mapping[str, Any]]) -> None:
        """Take a full list of one kind: an object no longer listed went meanwhile."""
        listed = {((i.get("metadata") or {}).get("name") or "") for i in items}
        for key, objs in self.by_job.items():
            if namespace and key[0] != namespace:
                continue
            for name in [n for n in objs if n[0] == kind and n[1] not in listed]:
                del objs[name]
                self.where.pop((key[0], *name), None)
                self.changed(key)
        self.apply(kind, (("ADDED", i) for i in items))

    def forget(self, namespace: str) -> None:
        for key in [k for k in self.by_job if k[0] == namespace]:
            del self.by_job[key]
        self.where = {w: k for w, k in self.where.items() if w[0] != namespace}


def _content(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = obj.get("metadata") or {}
    return meta.get("labels"), meta.get("deletionTimestamp"), *(obj.get(k) for k in KEPT)


class OwnedWatch:
    """An OwnedIndex kept current for one resource (``api``, of ``kind``) in one namespace (all
    if empty) by a list and a watch in a thread of its own; ``ready`` raises why while the
    objects cannot be listed."""

    def __init__(self, kube: Kube, api: Api, kind: str, namespace: str, index: OwnedIndex):
        self.kube, self.api, self.kind, self.namespace = kube, api, kind, namespace
        self.index = index
        self.tried = asyncio.Event()
        self.unseen = ""
        self.stopped = threading.Event()
        self.response: Any = None
        self.version = ""
        self.task = asyncio.create_task(self._follow(), name=f"{api[2]}/{namespace or '*'}")

    async def ready(self) -> str:
        """Once the first list was tried: why the objects cannot be seen ('' if they can)."""
        await self.tried.wait()
        return self.unseen

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        path = objects_path(self.api, self.namespace)
        where = f"{self.api[2]} in {self.namespace or 'all namespaces'}"
        failures = 0

        def deliver(events: list[Any], version: str) -> None:  # in the watch's thread
            self.version = version
            if events and not self.stopped.is_set():
                _call_soon(loop, self.index.apply, self.kind, events)

        def opened(response: Any) -> None:
            self.response = response
            if self.stopped.is_set():
                _end(response)

        while True:
            listing = not self.version
            try:
                if listing:
                    verb = f"list_{self.api[2]}"
                    items, self.version = await self.kube.list_objects(verb, path, c.LABEL_JOB)
                    self.index.replace(self.kind, self.namespace, items)
                    self.unseen, failures = "", 0
                    self.tried.set()
                await _in_thread(watch, self.kube, path, c.LABEL_JOB, self.version, deliver, opened)
                failures = 0
            except WatchExpired:
                self.version = ""
            except Exception as exc:
                failures += 1
                step = f"{'listing' if listing else 'watching'} {where}"
                if listing:
                    self.unseen = f"{step}: {api_message(exc)}"
                    self.tried.set()
                backoff = min(MAX_BACKOFF, 0.5 * 2**failures)
                log.warning("%s: %s; again in %.1fs", step, api_message(exc), backoff)
                await asyncio.sleep(backoff)

    def stop(self) -> None:
        self.stopped.set()
        self.task.cancel()
        if self.response is not None:
            _end(self.response)
