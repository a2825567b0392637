"""The end state of scripted jobs (harness.scenario), checked against their scripts."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import jobs as ddpjobs
from . import pods as podctl
from .cluster import Cluster
from .podwatch import LABEL_JOB, is_transient, worker_key

if TYPE_CHECKING:
    from .scenario import Ledger, ScriptedJob

FINISHED = ("Succeeded", "Failed")


def verify(
    cluster: Cluster,
    ns: str,
    jobs: list[ScriptedJob],
    settle: float = 15,
    ledger: Ledger | None = None,
) -> list[str]:
    """Problems of the end state, each starting "<job>:" or "pod <name>:" (empty: none):

    * a job not in its expected phase; a failing job that did not use up its backoff limit; a
      flaky job that succeeded without a restart;
    * a pod labelled with a job name whose controller ownerReference is not that job;
    * pods of an attempt later than the job's ``status.restarts``; ``status.workers`` counts
      that are not those of the job's live pods of its current attempt;
    * a Succeeded job with a worker of its last attempt Failed or still Running, or, given the
      ``ledger``, with a worker of its last attempt never seen Succeeded.

    Retried for up to ``settle`` seconds, so that status updates still in flight are not
    mistaken for problems."""
    deadline = time.monotonic() + settle
    while True:
        problems = _problems(cluster, ns, jobs, ledger)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(0.5)


def _problems(
    cluster: Cluster, ns: str, jobs: list[ScriptedJob], ledger: Ledger | None
) -> list[str]:
    found: list[str] = []
    objs = {
        j["metadata"]["name"]: j
        for j in cluster.custom.list_namespaced_custom_object(
            ddpjobs.GROUP, ddpjobs.VERSION, ns, ddpjobs.PLURAL
        )["items"]
    }
    pods = podctl.list_pods(cluster, ns, LABEL_JOB)
    for pod in pods:
        key, meta = worker_key(pod), pod["metadata"]
        owner = objs.get(key[0]) if key else None
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
        if not owner or [r["uid"] for r in refs] != [owner["metadata"]["uid"]]:
            found.append(f"pod {meta['name']}: controller {refs} is not its job {key and key[0]}")
    succeeded = None
    if ledger is not None:
        recs = ledger.snapshot()
        succeeded = {(r.job, r.index, r.attempt) for r in recs if r.phase == "Succeeded"}
    for job in jobs:
        obj = objs.get(job.name)
        if obj is None:
            found.append(f"{job.name}: not found")
            continue
        mine = [p for p in pods if (worker_key(p) or ("",))[0] == job.name]
        found += _job_problems(job, obj.get("status") or {}, mine, succeeded)
    return found


def _job_problems(
    job: ScriptedJob,
    status: dict[str, Any],
    pods: list[dict[str, Any]],
    succeeded: set[tuple[str, int, int]] | None,
) -> list[str]:
    found = []
    name = job.name
    phase, restarts = status.get("phase"), int(status.get("restarts") or 0)
    if phase != job.expected_phase:
        found.append(f"{name}: {job.kind} job is {phase}, expected {job.expected_phase}")
    if job.kind == "fail" and restarts != job.backoff_limit:
        found.append(f"{name}: failed after {restarts} restarts, not {job.backoff_limit}")
    if job.kind == "flaky" and restarts < 1:
        found.append(f"{name}: flaky job succeeded without a restart")
    if newer := [p["metadata"]["name"] for p in pods if worker_key(p)[2] > restarts]:
        found.append(f"{name}: restarts {restarts}, but pods of a later attempt: {newer}")
    current = [p for p in pods if worker_key(p)[2] == restarts]
    counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for p in current:
        if not p["metadata"].get("deletionTimestamp"):
            key = ((p.get("status") or {}).get("phase") or "Pending").lower()
            counts[key] = counts.get(key, 0) + 1
    workers = {k: int(v or 0) for k, v in (status.get("workers") or {}).items()}
    if workers != counts:
        found.append(f"{name}: status.workers {workers}, but its pods say {counts}")
    if phase == "Succeeded":
        if unfinished := [
            p["metadata"]["name"]
            for p in current
            if (p.get("status") or {}).get("phase") != "Succeeded"
        ]:
            found.append(f"{name}: Succeeded, but workers did not: {unfinished}")
        if succeeded is not None and (
            never := [i for i in range(job.nodes) if (name, i, restarts) not in succeeded]
        ):
            found.append(f"{name}: Succeeded, but workers {never} never seen Succeeded")
    return found


def run_until_done(
    cluster: Cluster, ns: str, jobs: list[ScriptedJob], timeout: float
) -> dict[str, str]:
    """Wait until every job is Succeeded or Failed, or ``timeout``; returns name -> phase
    ("" for no phase yet, "Missing" for no such job). Outlives API server outages."""
    deadline = time.monotonic() + timeout
    phases = {j.name: "Missing" for j in jobs}
    while True:
        try:
            items = cluster.custom.list_namespaced_custom_object(
                ddpjobs.GROUP, ddpjobs.VERSION, ns, ddpjobs.PLURAL, _request_timeout=10
            )["items"]
            found = {o["metadata"]["name"]: (o.get("status") or {}).get("phase") for o in items}
            phases = {j.name: found.get(j.name, "Missing") or "" for j in jobs}
        except Exception as exc:
            if not is_transient(exc):
                raise
        if all(p in FINISHED for p in phases.values()) or time.monotonic() > deadline:
            return phases
        time.sleep(0.5)
