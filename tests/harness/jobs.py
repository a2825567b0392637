"""DDPJobs on the cluster: apply, read, wait for a condition or phase."""

from __future__ import annotations

from typing import Any

import yaml

from . import pods
from .cluster import Cluster, wait_for

GROUP, VERSION, PLURAL = "ddp-operator.io", "v1alpha1", "ddpjobs"


def apply(cluster: Cluster, manifest: dict[str, Any], check: bool = True):
    """`kubectl apply` a manifest, as a user would; returns the CompletedProcess."""
    return cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=check)


def get(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    items = cluster.custom.list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, field_selector=f"metadata.name={name}"
    )["items"]
    return items[0] if items else None


def condition(job: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond
    return None


def wait_condition(
    cluster: Cluster, ns: str, name: str, type_: str, status: str = "True", timeout: float = 60
) -> dict[str, Any]:
    """Wait for a status condition; returns the job. Polled every 0.1 s throughout: a condition
    may hold for under a second (``Restarting`` while kwok's pods come back)."""

    def probe():
        job = get(cluster, ns, name)
        cond = condition(job, type_)
        return job if cond and cond["status"] == status else None

    what = f"ddpjob {ns}/{name} condition {type_}={status}"
    return wait_for(probe, timeout=timeout, what=what, slowest=0.1)


def wait_phase(cluster: Cluster, ns: str, name: str, phase: str, timeout: float = 60) -> dict:
    return wait_for(
        lambda: (
            (j := get(cluster, ns, name)) and (j.get("status") or {}).get("phase") == phase and j
        ),
        timeout=timeout,
        what=f"ddpjob {ns}/{name} phase {phase}",
    )


def events(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    """Events on the DDPJob, oldest first."""
    evs = cluster.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.kind=DDPJob,involvedObject.name={name}"
    )
    out = cluster.api.sanitize_for_serialization(evs)["items"]
    return sorted(out, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def wait_event(
    cluster: Cluster, ns: str, name: str, reason: str, timeout: float = 15
) -> list[dict[str, Any]]:
    """Wait for Events of this reason on the DDPJob (the operator posts them after writing the
    status, so they may trail it); returns them, oldest first."""
    return wait_for(
        lambda: [e for e in events(cluster, ns, name) if e["reason"] == reason],
        timeout=timeout,
        what=f"a {reason} Event on {ns}/{name}",
    )


def workers(cluster: Cluster, ns: str, job: str) -> list[dict[str, Any]]:
    """The job's worker pods, by worker index."""
    found = pods.list_pods(cluster, ns, f"ddp-operator.io/job-name={job}")
    return sorted(found, key=lambda p: int(p["metadata"]["labels"]["ddp-operator.io/worker-index"]))


def attempt_of(pod: dict[str, Any]) -> int:
    """The attempt a worker pod was created in: its label, or the one builds up to 0.2.0 wrote."""
    labels = pod["metadata"]["labels"]
    found = labels.get("ddp-operator.io/created-in-attempt") or labels["ddp-operator.io/attempt"]
    return int(found)


def wait_running(
    cluster: Cluster, ns: str, job: str, n: int, attempt: int = 0, timeout: float = 60
) -> list[dict[str, Any]]:
    """Wait until exactly ``n`` live workers of the given attempt are Running; return them."""

    def probe() -> list[dict[str, Any]] | None:
        ws = [w for w in workers(cluster, ns, job) if not w["metadata"].get("deletionTimestamp")]
        ok = len(ws) == n and all(
            w["status"].get("phase") == "Running" and attempt_of(w) == attempt for w in ws
        )
        return ws if ok else None

    return wait_for(
        probe, timeout=timeout, what=f"{n} running workers of {job} (attempt {attempt})"
    )


def _container_line(cs: dict[str, Any]) -> str:
    """One container's status in a line: its state, restarts and container ID (short)."""
    state = cs.get("state") or {}
    kind = next(iter(state), "none")
    detail = state.get(kind) or {}
    said = {k: detail[k] for k in ("reason", "exitCode", "startedAt", "finishedAt") if k in detail}
    last = next(iter((cs.get("lastState") or {}).values()), None) or {}
    was = f", last exit {last.get('exitCode')} at {last.get('finishedAt')}" if last else ""
    cid = (cs.get("containerID") or "").removeprefix("containerd://")[:12]
    return f"{cs['name']}: {kind} {said}, restarts {cs.get('restartCount')}, id {cid}{was}"


def record(cluster: Cluster, ns: str, name: str) -> str:
    """What a failing test needs to say about a job, in a few lines (CI shows only the
    assertion's message): its phase, restarts and conditions, its Events, and each worker pod
    (node, phase, annotations of the operator, every container's status)."""
    job = get(cluster, ns, name) or {}
    status = job.get("status") or {}
    lines = [f"job {ns}/{name}: phase {status.get('phase')}, restarts {status.get('restarts')}"]
    lines += [
        f"  condition {c.get('type')}={c.get('status')} {c.get('reason')}: "
        f"{(c.get('message') or '')[:160]}"
        for c in status.get("conditions") or []
    ]
    lines += [
        f"  event {e.get('lastTimestamp')} {e.get('reason')}: {(e.get('message') or '')[:160]}"
        for e in events(cluster, ns, name)
    ]
    for pod in workers(cluster, ns, name):
        meta, pod_status = pod["metadata"], pod.get("status") or {}
        said = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(GROUP)}
        lines.append(
            f"  pod {meta['name']} ({meta.get('uid')}) on {pod['spec'].get('nodeName')}: "
            f"{pod_status.get('phase')}, deleting {meta.get('deletionTimestamp')}, {said}"
        )
        lines += [f"    {_container_line(cs)}" for cs in pod_status.get("containerStatuses") or []]
    return "\n".join(lines)
