"""A report flood on the real API server, from this test process on kwok nodes: a token the API
server binds to a worker pod of the job (a TokenRequest, as the kubelet asks for the pod's own),
60 reports of the last step in 2 s, and the operator's request metric counting its progress
writes: 2 at most (the first complete report at once, the latest once the interval is over);
and a flood of made-up tokens, which costs the API server no TokenReview and never has its
bodies read (the same from a pod of another namespace on the real node, while a job starts:
test_realnode_progress_flood)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from test_metrics import scrape

from ddp_operator.model import constants as c

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running
from harness.nodes import fake_nodes_namespace
from harness.operator import OperatorProcess, free_port
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.serial]

WRITES = 'ddp_operator_api_requests_total{code="200",verb="patch_progress"}'
REVIEWS = 'ddp_operator_api_requests_total{code="200",verb="create_tokenreview"}'


def pod_token(cluster: Cluster, ns: str, pod: dict) -> str:
    """A token of the pod's service account for the progress audience, bound to the pod."""
    meta = pod["metadata"]
    ref = {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
    spec = {"audiences": [c.PROGRESS_AUDIENCE], "expirationSeconds": 600, "boundObjectRef": ref}
    sa = pod["spec"].get("serviceAccountName") or "default"
    return cluster.core.create_namespaced_service_account_token(sa, ns, {"spec": spec}).status.token


def post(url: str, token: str, report: dict) -> int:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    req = urllib.request.Request(url, json.dumps(report).encode(), headers, method="POST")
    with urllib.request.urlopen(req, timeout=10) as answer:
        return answer.status


@pytest.fixture
def reporting(cluster: Cluster, crd: str) -> Iterator[tuple[str, int, int]]:
    """A namespace of its own and an operator with the progress endpoint and metrics:
    (namespace, endpoint port, metrics port)."""
    ns = f"ddpf-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(fake_nodes_namespace(ns))
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, timeout=30, what="sa")
    port, metrics = free_port(), free_port()
    op = OperatorProcess(
        cluster, ns, "--progress-address", f"127.0.0.1:{port}", "--metrics-port", str(metrics)
    ).start()
    try:
        op.wait_ready()
        yield ns, port, metrics
    finally:
        op.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")


def test_sixty_reports_of_the_last_step_in_two_seconds_make_two_writes_at_most(
    cluster: Cluster, reporting: tuple[str, int, int]
) -> None:
    ns, port, metrics = reporting
    jobs.apply(cluster, ddpjob("flood", ns, nodes=2))
    workers = wait_running(cluster, ns, "flood", 2)
    jobs.wait_phase(cluster, ns, "flood", "Running")
    token = pod_token(cluster, ns, workers[0])
    url = f"http://127.0.0.1:{port}/v1/namespaces/{ns}/ddpjobs/flood/progress"
    assert post(url, token, {"step": 50, "total": 100}) == 202
    wait_for(lambda: scrape(metrics).get(WRITES) == 1, timeout=10, what="the first write")
    time.sleep(6)  # past the interval: the flood starts with a write allowed
    started = time.monotonic()
    for i in range(60):
        report = {"step": 100 + i, "total": 100, "metrics": {"loss": float(i)}}
        assert post(url, token, report) == 202
        time.sleep(max(0.0, started + (i + 1) * 2 / 60 - time.monotonic()))
    assert time.monotonic() - started < 4
    # The latest report reaches the job within the interval; nothing more is written.
    job = wait_for(
        lambda: (
            (j := jobs.get(cluster, ns, "flood") or {})
            .get("status", {})
            .get("progress", {})
            .get("metrics", {})
            .get("loss")
            == 59.0
            and j
        ),
        timeout=10,
        what="the latest report on the job",
    )
    time.sleep(6)
    writes = scrape(metrics)[WRITES] - 1
    p = job["status"]["progress"]
    assert p["step"] == 100 and p["total"] == 100 and p["percent"] == 100.0, p  # clamped
    assert 1 <= writes <= 2, writes


def answer(url: str, token: str, body: bytes) -> int:
    """The endpoint's HTTP status for ``body`` sent with ``token``."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    req = urllib.request.Request(url, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as done:
            return done.status
    except urllib.error.HTTPError as refused:
        return refused.code


def made_up(i: int) -> str:
    """A token shaped as a service account token (a JWT) that no one issued: every other one
    names a pod (that is no worker of the job)."""
    part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    claims: dict = {"sub": f"nobody-{i}"}
    if i % 2:
        pod = {"name": f"flooded-worker-{i}", "uid": str(uuid.uuid4())}
        claims["kubernetes.io"] = {"namespace": "x", "pod": pod}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.{part({'sig': i})}"


def test_a_thousand_made_up_tokens_cost_no_review(
    cluster: Cluster, reporting: tuple[str, int, int]
) -> None:
    """1,000 reports with made-up tokens (naming no pod, or a pod that is no worker of the
    job's) and bodies that are no JSON: the bodies are never read (403, never 400), no token
    costs a TokenReview, and a worker's real token is taken at once after them."""
    ns, port, metrics = reporting
    jobs.apply(cluster, ddpjob("flooded", ns, nodes=1))
    workers = wait_running(cluster, ns, "flooded", 1)
    url = f"http://127.0.0.1:{port}/v1/namespaces/{ns}/ddpjobs/flooded/progress"
    codes = Counter(answer(url, made_up(i), b"not json") for i in range(1000))
    assert scrape(metrics).get(REVIEWS, 0) == 0
    token = pod_token(cluster, ns, workers[0])
    assert answer(url, token, json.dumps({"step": 1, "total": 2}).encode()) == 202
    assert codes == {403: 1000}, codes
    assert scrape(metrics).get(REVIEWS) == 1
