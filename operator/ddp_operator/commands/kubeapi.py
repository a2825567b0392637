"""The cluster as `kubectl ddp` reads it: the current kubeconfig context's jobs, pods, Events
and, for kwok's simulated nodes, node metadata. A cluster that does not serve DDPJobs (no CRD)
is ``CRDMissing``, said in one line."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml

from ..decide import kubelet_events, presence
from ..model import constants as c

# A node's metadata alone, and kwok's mark of the nodes it simulates.
PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
KWOK_NODE = "kwok.x-k8s.io/node"


class CRDMissing(Exception):
    """The cluster does not serve DDPJobs: its message says how to install the CRD."""


class Api:
    """The cluster of the current kubeconfig context (KUBECONFIG or --kubeconfig)."""

    # The DDPJob resource asked for: (group, version, plural); a test points it at one the
    # cluster does not serve, to see what a cluster without the CRD answers.
    resource: tuple[str, str, str] = (c.GROUP, c.VERSION, c.PLURAL)

    def __init__(self, kubeconfig: str | None, context: str | None):
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((x for x in contexts if x["name"] == context), active) if context else active
        self.namespace = (chosen or {}).get("context", {}).get("namespace") or "default"

    def _ddpjobs(
        self, call: Callable[..., Any], *args: Any, ns: str | None = None, **kw: Any
    ) -> Any:
        """``call`` (of ``self.custom``) on the DDPJob resource in namespace ``ns`` (None: every
        namespace) with ``args``; CRDMissing if the cluster does not serve the resource."""
        from kubernetes.client.exceptions import ApiException

        group, version, plural = self.resource
        where = () if ns is None else (ns,)
        try:
            return call(group, version, *where, plural, *args, **kw)
        except ApiException as exc:
            if presence.crd_missing(exc.status, exc.body):
                raise CRDMissing(presence.NO_CRD) from exc
            raise

    def job(self, ns: str, name: str) -> dict[str, Any]:
        return self._ddpjobs(self.custom.get_namespaced_custom_object, name, ns=ns)

    def jobs(self, ns: str | None) -> list[dict[str, Any]]:
        """The DDPJobs of namespace ``ns``, or of every namespace (None)."""
        if ns is None:
            found = self._ddpjobs(self.custom.list_cluster_custom_object)
        else:
            found = self._ddpjobs(self.custom.list_namespaced_custom_object, ns=ns)
        return found.get("items") or []

    def create(self, ns: str, body: dict[str, Any], dry_run: str | None = None) -> dict[str, Any]:
        """Create the DDPJob ``body`` in ``ns`` (``dry_run="All"``: only ask whether it would
        be refused)."""
        kw = {"dry_run": dry_run} if dry_run else {}
        return self._ddpjobs(self.custom.create_namespaced_custom_object, body, ns=ns, **kw)

    def pickup(self, ns: str, name: str, seconds: float) -> str | None:
        """Wait until an operator has written the job's status (None) or the job is older than
        ``seconds`` without it: then the line that says so (``presence.unheard``). Polled, 0.1 s
        at first, at most 1 s apart; ``seconds`` + 5 s at most by this machine's clock."""
        from datetime import UTC, datetime

        give_up, pause = time.monotonic() + seconds + 5, 0.1
        while True:
            job = self.job(ns, name)
            if not presence.awaits_operator(job):
                return None
            if said := presence.unheard(job, datetime.now(UTC), seconds):
                return said
            if time.monotonic() > give_up:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

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
