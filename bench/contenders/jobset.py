"""JobSet (what Kubeflow Trainer v2 runs every TrainJob on), run by hack/cluster/jobset.sh with
its released defaults, on equivalent JobSets: one replicated job of one indexed Job of N pods,
DNS hostnames on a headless Service, the same pod, and a failure policy that recreates every
Job (all workers) when one fails. The Kubernetes Job controller (in the controller manager)
creates the pods; its CPU is counted with the control plane's."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cluster import ROOT, log, pod_spec
from contenders.base import Contender, process_dead

SCRIPT = ROOT / "hack/cluster/jobset.sh"
STATE = ROOT / ".cluster/jobset"


def jobset(name: str, ns: str, nodes: int) -> dict[str, Any]:
    """A JobSet of ``nodes`` pods: all restarted (up to 3 times) when one fails."""
    job = {
        "parallelism": nodes,
        "completions": nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,  # a failed worker fails its Job, and the JobSet restarts the group
        "template": {"spec": {**pod_spec("trainer"), "restartPolicy": "Never"}},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}],
        },
    }


class JobSet(Contender):
    name, title = "jobset", "JobSet"
    job_label = "jobset.sigs.k8s.io/jobset-name"
    job_api = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
    done = "Completed"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        log("starting JobSet (hack/cluster/jobset.sh up; builds it once)")
        self._script("up")
        try:
            yield
        finally:
            self._script("down")

    def _script(self, action: str) -> None:
        done = subprocess.run([str(SCRIPT), action], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"jobset.sh {action} failed: {done.stderr.strip()[-2000:]}")

    def _pid(self) -> int | None:
        pidfile = STATE / "jobset.pid"
        return int(pidfile.read_text()) if pidfile.exists() else None

    def pids(self) -> list[int]:
        pid = self._pid()
        return [pid] if pid and Path(f"/proc/{pid}").exists() else []

    def dead(self) -> str | None:
        return process_dead(self._pid(), "JobSet", STATE / "jobset.log")

    def jobs(self, ns: str, names: list[str], nodes: int) -> list[dict[str, Any]]:
        return [jobset(n, ns, nodes) for n in names]
