"""What every contender offers the scenarios: its controller's lifetime and processes, where its
jobs live, how to create N jobs of M workers, and how its pods and jobs say where they are."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from cluster import Cluster, log, unless
from podwatch import PodWatch

TIMEOUT = 504


def drain(response: Any) -> None:
    """Read a raw response and return its connection to the pool (no TLS handshake per call)."""
    response.read()
    response.release_conn()


class Contender:
    """A way to run DDP jobs: ours, raw (no controller), or a peer's controller."""

    name = ""
    title = ""  # as the report's columns name it
    job_label = ""  # the pod label naming a pod's job
    job_api: tuple[str, str, str] | None = None  # group, version, plural of its job objects
    done = "Succeeded"  # the condition type of a job that finished well
    group_restart = True  # a failed worker restarts every worker (else only the failed one)
    shared: frozenset[str] = frozenset()  # namespaces its controller needs kept (Kubeflow's)

    def __init__(self, cluster: Cluster, pool: ThreadPoolExecutor) -> None:
        self.cluster, self.pool = cluster, pool
        self.used: set[str] = set()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Its controller runs inside this block (none for raw)."""
        yield

    def pids(self) -> list[int]:
        """Its controller's processes on this machine, for the CPU and memory it costs."""
        return []

    def requests(self) -> dict[str, int] | None:
        """The controller's own API requests so far, by verb, where it counts them."""
        return None

    def dead(self) -> str | None:
        """Why its controller cannot act (it exited), or None."""
        return None

    def ns_name(self, tag: str) -> str:
        """The name of a scenario's namespace: bench-<contender>-<tag>."""
        return f"bench-{self.name}-{tag}"

    def namespace(self, tag: str) -> str:
        """The namespace of a scenario's runs (``ns_name``), empty: runs reuse it, so that no
        controller opens and closes watches between runs."""
        ns = self.cluster.namespace(self.ns_name(tag))
        self.used.add(ns)
        self.drop(ns)  # what an interrupted earlier run left
        return ns

    def drop(self, ns: str) -> None:
        """Empty a run's namespace as a user cleaning up would: its jobs first (deleting the
        namespace first would have controllers recreate what its deletion removes: JobSet
        retries its Jobs thousands of times), then what is left of its pods, Services and
        ConfigMaps."""
        core, custom = self.cluster.core, self.cluster.custom
        if self.job_api:
            group, version, plural = self.job_api
            custom.delete_collection_namespaced_custom_object(
                group, version, ns, plural, propagation_policy="Background"
            )
            left = lambda: custom.list_namespaced_custom_object(  # noqa: E731
                group, version, ns, plural, limit=1
            )["items"]
            self.cluster.wait_gone(ns, lambda: bool(left()))
        # Deleting 2048 pods of 58 KB (S5) can outlast the API server's 60 s request timeout
        # (504): it asks again for what is left, three times at most, then fails the run.
        for tries_left in (2, 1, 0):
            try:
                core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                break
            except ApiException as exc:
                if exc.status != TIMEOUT or not tries_left:
                    raise
                log(f"deleting the pods of {ns}: the API server timed out (504); asking again")
        self.cluster.wait_gone(ns)
        for svc in core.list_namespaced_service(ns).items:
            with unless(404):  # the garbage collector may be first
                core.delete_namespaced_service(svc.metadata.name, ns)
        if self.job_label:  # raw's ConfigMaps (the operator's go with their jobs)
            core.delete_collection_namespaced_config_map(ns, label_selector=self.job_label)

    def close(self) -> None:
        """Delete the namespaces its runs used (but a shared one) and wait until they are gone."""
        self.cluster.drop(*sorted(self.used - self.shared))
        self.used.clear()

    def jobs(self, ns: str, names: list[str], nodes: int) -> list[dict[str, Any]]:
        """Its job objects (one per name) of ``nodes`` workers each."""
        raise NotImplementedError

    def create(self, ns: str, names: list[str], nodes: int) -> None:
        """Create the jobs, concurrently."""
        assert self.job_api is not None
        group, version, plural = self.job_api

        def one(job: dict[str, Any]) -> None:
            drain(
                self.cluster.custom.create_namespaced_custom_object(
                    group, version, ns, plural, job, _preload_content=False
                )
            )

        list(self.pool.map(one, self.jobs(ns, names, nodes)))

    def decides(self, labels: dict[str, str]) -> bool:
        """Whether a pod's success is one its job waits for to be done (S3 times from the last)."""
        return True

    def restarted(self, pods: PodWatch, old: set[str], nodes: int) -> float | None:
        """When the workers of the attempt after a failure were all Running (None: not yet).
        A group restart replaces every worker; a per-pod restart only the failed one."""
        new = sorted(t for uid, t in pods.running.items() if uid not in old)
        want = nodes if self.group_restart else 1
        return new[want - 1] if len(new) >= want else None


def process_dead(pid: int | None, name: str, log: Path) -> str | None:
    """Why a controller process is not there, or None when it runs."""
    if pid is None or not Path(f"/proc/{pid}").exists():
        return f"{name} is not running; see {log}"
    return None
