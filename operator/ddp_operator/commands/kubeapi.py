"""The cluster as `kubectl ddp` reads it: the current kubeconfig context's jobs, pods, Events
and, for kwok's simulated nodes, node metadata."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml

from ..decide import kubelet_events
from ..model import constants as c

# A node's metadata alone, and kwok's mark of the nodes it simulates.
PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
KWOK_NODE = "kwok.x-k8s.io/node"


class Api:
    """The cluster of the current kubeconfig context (KUBECONFIG or --kubeconfig)."""

    def __init__(self, kubeconfig: str | None, context: str | None):
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((x for x in contexts if x["name"] == context), active) if context else active
        self.namespace = (chosen or {}).get("context", {}).get("namespace") or "default"

    def job(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name)

    def pods(self, ns: str, name: str) -> list[dict[str, Any]]:
        found = self.core.list_namespaced_pod(ns, label_selector=f"{c.LABEL_JOB}={name}")
        items = self.api.sanitize_for_serialization(found).get("items") or []
        return sorted(items, key=lambda p: int(p["metadata"]["labels"].get(c.LABEL_INDEX, 0)))

    def pod_warnings(self, ns: str, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The namespace's Warning Events about pods, if some pod is bound but not started."""
        if not any(
            (p.get("status") or {}).get("phase") == "Pending"
            and (p.get("spec") or {}).get("nodeName")
            for p in pods
        ):
            return []
        from kubernetes.client.exceptions import ApiException

        try:
            found = self.core.list_namespaced_event(
                ns, field_selector=kubelet_events.FIELD_SELECTOR
            )
        except ApiException as exc:  # e.g. not allowed to list Events: the rest still shows
            print(f"(the pods' Events could not be read: {message(exc)})", file=sys.stderr)
            return []
        return self.api.sanitize_for_serialization(found).get("items") or []

    def fake_nodes(self, names: Iterable[str]) -> set[str]:
        """Those of the nodes ``names`` that kwok simulates (annotation kwok.x-k8s.io/node:
        fake), each read as its metadata only, 16 at a time; none if nodes may not be read (no
        mark then)."""
        from kubernetes.client.exceptions import ApiException

        def fake(name: str) -> bool | None:  # None: may not be read
            try:
                resp = self.core.read_node(
                    name, _headers={"Accept": PARTIAL}, _preload_content=False
                )
            except ApiException as exc:
                return None if exc.status in (401, 403) else False  # else gone meanwhile
            meta = json.loads(resp.data).get("metadata") or {}
            return (meta.get("annotations") or {}).get(KWOK_NODE) == "fake"

        wanted = sorted(set(names))
        with ThreadPoolExecutor(16) as pool:
            said = list(pool.map(fake, wanted))
        if None in said:
            return set()
        return {name for name, is_fake in zip(wanted, said, strict=True) if is_fake}


def message(exc: Any) -> str:
    """The message of an API server's refusal (its Status body), else the body."""
    try:
        return yaml.safe_load(exc.body).get("message", "")
    except Exception:
        return str(exc.body or "")
