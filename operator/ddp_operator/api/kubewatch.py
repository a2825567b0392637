"""The operator's streaming reads from the API server: a watch of pods (and of the objects its
jobs own, ``ownedwatch``). With ``kube``, the only module of the operator that does I/O."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from kubernetes.client.exceptions import ApiException

from .kube import Kube
from .transport import pods_path

GONE = 410
WATCH_SECONDS = 300  # the API server ends each watch after about this long; it is resumed


class WatchExpired(Exception):
    """The API server no longer has the events since the version asked for (410): list again."""


def watch_pods(
    kube: Kube,
    namespace: str,
    selector: str,
    version: str,
    deliver: Callable[[list[Any], str], None],
    opened: Callable[[Any], None] = lambda _: None,
) -> str:
    """Blocking: ``watch`` the pods of ``namespace`` (every namespace if empty)."""
    return watch(kube, pods_path(namespace), selector, version, deliver, opened)


def watch(
    kube: Kube,
    path: str,
    selector: str,
    version: str,
    deliver: Callable[[list[Any], str], None],
    opened: Callable[[Any], None] = lambda _: None,
) -> str:
    """Blocking: follow the events of the objects at ``path`` matching the label ``selector``
    after ``version``, handing each chunk's events to ``deliver`` as
    (type, object) pairs, with the version to resume from after them (a bookmark's alone moves
    it), until the API server ends the watch; returns that version. WatchExpired if the version
    asked for is too old. ``opened`` gets the response, whose
    ``shutdown()`` ends the watch from another thread."""
    query = urlencode(
        {
            "labelSelector": selector,
            "watch": 1,
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": WATCH_SECONDS,
        }
    )
    try:
        response = kube.open("GET", path, query=query, timeout=(10, WATCH_SECONDS + 30)).response
    except ApiException as exc:
        if exc.status == GONE:
            raise WatchExpired(str(exc.reason)) from exc
        raise
    opened(response)
    rest = b""
    try:
        for chunk in response.stream(2**16, decode_content=True):
            *lines, rest = (rest + chunk).split(b"\n")
            events, was = [], version
            for event in map(json.loads, filter(None, lines)):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == GONE:
                        raise WatchExpired(obj.get("message") or "resource version too old")
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    events.append((event["type"], obj))
            if events or version != was:
                deliver(events, version)
    finally:
        response.release_conn()
    return version
