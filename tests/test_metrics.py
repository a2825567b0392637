"""The operator's Prometheus endpoint, scraped after a job with a group restart."""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running
from harness.nodes import fake_nodes_namespace
from harness.operator import OperatorProcess, free_port
from jobs import ddpjob

pytestmark = pytest.mark.cluster


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def test_metrics_after_a_job(cluster: Cluster, crd: str) -> None:
    ns = f"ddpm-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(fake_nodes_namespace(ns))
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, timeout=30, what="sa")
    port = free_port()
    op = OperatorProcess(cluster, ns, "--metrics-port", str(port)).start()
    try:
        op.wait_ready()
        jobs.apply(cluster, ddpjob("m", ns, nodes=3, backoffLimit=2))
        wait_running(cluster, ns, "m", 3)
        pods.finish(cluster, ns, "m-worker-0", 1)
        for w in wait_running(cluster, ns, "m", 3, attempt=1):
            pods.finish(cluster, ns, w["metadata"]["name"], 0)
        jobs.wait_phase(cluster, ns, "m", "Succeeded")
        m = wait_for(
            lambda: (s := scrape(port)).get('ddp_operator_jobs{phase="Succeeded"}') == 1 and s,
            timeout=10,
            what="the jobs gauge",
        )
    finally:
        op.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")
    assert m['ddp_operator_jobs{phase="Running"}'] == 0
    assert m["ddp_operator_group_restarts_total"] == 1
    assert m["ddp_operator_pods_created_total"] == 6
    assert m["ddp_operator_reconcile_seconds_count"] >= 3
    assert m['ddp_operator_api_requests_total{code="200",verb="create_pod"}'] == 6
    assert m['ddp_operator_api_requests_total{code="200",verb="delete_pod"}'] >= 2
    assert not any(k.startswith("ddp_operator_api_errors_total{") and v for k, v in m.items())
