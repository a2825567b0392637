"""The Helm chart as users install it, with the operator image built here (hack/cluster/image.sh
from the Dockerfile) running as a real pod on the real node: in-cluster config through the
`kubernetes` Service, its ServiceAccount, non-root, a read-only root filesystem. It runs a DDPJob
of real containers to Succeeded, and its metrics are scraped from the pod."""

from __future__ import annotations

import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness import jobs
from harness.cluster import ROOT, Cluster, tool, wait_for
from harness.realnode import NODE, ON_REAL_NODE, pod_on_real_node, trainer_job, wait_pod_done

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(2400)]

CHART = ROOT / "charts" / "ddp-operator"
# Whether the operator's progress port answers this pod: "REACHED" or "UNREACHABLE" (within 5 s).
PROBE = """
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5)
    print("REACHED")
except urllib.error.HTTPError as e:
    print("REACHED", e.code)
except Exception as e:
    print("UNREACHABLE", type(e).__name__, e)
"""


@pytest.fixture
def release(
    cluster: Cluster, crd: str, images: dict[str, str], tmp_path: Path
) -> Iterator[tuple[str, str]]:
    """The chart installed, watching a namespace of its own (not one the session's operator
    watches); yields (that namespace, the operator's namespace)."""
    name = f"rn-{uuid.uuid4().hex[:6]}"
    ns, system = f"{name}-jobs", f"{name}-system"
    cluster.core.create_namespace({"metadata": {"name": ns}})
    repository, tag = images["operator"].rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "watchNamespaces": [ns],
        **ON_REAL_NODE,
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    helm = [tool("helm"), "--kubeconfig", str(cluster.kubeconfig)]
    run = {"capture_output": True, "text": True, "timeout": 240, "check": True}
    subprocess.run(
        [
            *helm,
            "install",
            name,
            str(CHART),
            "-n",
            system,
            "--create-namespace",
            "-f",
            str(tmp_path / "values.yaml"),
            "--wait",
            "--timeout",
            "3m",
        ],
        **run,
    )
    try:
        yield ns, system
    finally:
        subprocess.run([*helm, "uninstall", name, "-n", system, "--wait"], **run)
        for n in (ns, system):
            cluster.core.delete_namespace(n, propagation_policy="Background")


def test_the_chart_runs_the_operator_image_as_a_real_pod(
    cluster: Cluster, release: tuple[str, str], images: dict[str, str]
) -> None:
    ns, system = release
    pod = wait_for(lambda: _ready(cluster, system), timeout=120, what="the operator pod Ready")
    assert pod.spec.node_name == NODE
    name = pod.metadata.name
    # Non-root, and its root filesystem read-only (the process's own view).
    ident = cluster.kubectl("exec", "-n", system, name, "--", "id", "-u").stdout.strip()
    assert ident == "10001"
    write = cluster.kubectl("exec", "-n", system, name, "--", "touch", "/usr/x", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write

    # A training that reports its progress: through the chart's progress Service to the
    # operator pod, which reviews the pods' tokens with the chart's ServiceAccount.
    script = ["torchrun", "examples/scripts/progress_train.py", "--steps", "30"]
    job = trainer_job("charted", ns, images["trainer"], [*script, "--step-time", "0.05"])
    jobs.apply(cluster, job)
    jobs.wait_phase(cluster, ns, "charted", "Succeeded", timeout=300)
    events = jobs.wait_event(cluster, ns, "charted", "AllWorkersSucceeded")
    assert events, events
    reported = wait_for(
        lambda: (jobs.get(cluster, ns, "charted") or {})["status"].get("progress"),
        timeout=15,
        what="the training's progress on the job",
    )
    assert reported["step"] == 30 and reported["percent"] == 100, reported

    # Its metrics, scraped from the pod's address as Prometheus would.
    ip = cluster.core.read_namespaced_pod(name, system).status.pod_ip
    text = wait_for(lambda: _scrape(f"http://{ip}:9090/metrics"), timeout=30, what="the metrics")
    assert "ddp_operator_pods_created_total 2.0" in text, text
    assert 'ddp_operator_progress_reports_total{result="accepted"}' in text, text
    # The chart's NetworkPolicy: a pod that is no worker cannot reach the progress port, where
    # the workers' reports came in (and the metrics port, above, is open).
    url = f"http://{ip}:8090/readyz"
    probe = ["python", "-c", PROBE, url]
    cluster.core.create_namespaced_pod(ns, pod_on_real_node("stranger", images["trainer"], probe))
    done = wait_pod_done(cluster, ns, "stranger")
    said = cluster.core.read_namespaced_pod_log("stranger", ns, container="main")
    assert done.status.phase == "Succeeded" and "UNREACHABLE" in said, said
    logs = cluster.kubectl("logs", "-n", system, name).stdout
    assert "Forbidden" not in logs and "Traceback" not in logs, logs
    # One process all along: it never crashed nor failed its liveness probe.
    now = cluster.core.read_namespaced_pod(name, system)
    assert now.status.container_statuses[0].restart_count == 0, now.status


def _ready(cluster: Cluster, ns: str) -> object:
    for pod in cluster.core.list_namespaced_pod(ns).items:
        for cond in pod.status.conditions or []:
            if cond.type == "Ready" and cond.status == "True":
                return pod
    return None


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None
