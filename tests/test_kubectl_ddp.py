"""`kubectl ddp status | logs | submit` against the cluster: they read what the operator writes."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from test_chart import _sa_kubeconfig

from ddp_operator.commands import jobview, kubeapi, kubectl_ddp
from ddp_operator.decide import presence
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve

from harness import jobs, pods
from harness.cluster import ROOT, Cluster, wait_for
from harness.jobs import wait_running
from harness.operator import free_port
from jobs import ddpjob

KUBECTL_DDP = str(Path(sys.executable).parent / "kubectl-ddp")
POD_LOG = ROOT / ".cluster" / "pod-logs" / "containers.log"


def ddp(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KUBECTL_DDP, *args], env=cluster.env(), capture_output=True, text=True, timeout=60
    )


def test_render_status_without_a_cluster() -> None:
    body = ddpjob("v", "ns", nodes=3)
    body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    body["status"] = {
        "phase": "Pending",
        "restarts": 1,
        "conditions": [
            {"type": "Unschedulable", "status": "True", "message": "1 of 3 workers cannot..."},
            {"type": "GangScheduled", "status": "False", "message": "0 of 3 workers placed"},
            {"type": "Blocked", "status": "False", "message": "nothing blocks the job"},
        ],
    }
    job = resolve(body)
    running = builders.build_worker_pod(job, 0, attempt=1)
    running["spec"]["nodeName"] = "gpu-node-1"
    running["status"] = {"phase": "Running"}
    stuck = builders.build_worker_pod(job, 1, attempt=1)
    stuck["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/8 nodes are available",
            }
        ],
    }
    text = jobview.render_status(body, [running, stuck], now=datetime(2026, 1, 1, 0, 5, tzinfo=UTC))
    lines = text.splitlines()
    assert lines[0] == "ddpjob/v  phase=Pending  nodes=3  restarts=1  age=5m"
    assert "Unschedulable: 1 of 3 workers cannot..." in lines[1]
    assert lines[2] == "  GangScheduled: 0 of 3 workers placed"  # Blocked False: not shown
    assert lines[3].split() == ["WORKER", "POD", "PHASE", "NODE", "RESTARTS", "EXIT", "REASON"]
    assert lines[4].split() == ["0", "v-worker-0", "Running", "gpu-node-1", "1", "-", "-"]
    assert lines[5].split()[:5] == ["1", "v-worker-1", "Pending", "-", "1"]
    assert lines[5].endswith("0/8 nodes are available")
    assert lines[6].split() == ["2", "-", "NotCreated", "-", "-", "-", "-"]


def nodes_fake(cluster: Cluster, name: str) -> bool:
    node = cluster.core.read_node(name)
    return (node.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"


def test_workers_on_kwoks_fake_nodes_are_marked_and_the_mark_explained() -> None:
    body = ddpjob("f", "ns", nodes=2)
    job = resolve(body)
    placed = []
    for i, node in enumerate(("gpu-node-0", "real-node-0")):
        pod = builders.build_worker_pod(job, i)
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
        placed.append(pod)
    text = jobview.render_status(body, placed, fake_nodes={"gpu-node-0"})
    lines = text.splitlines()
    table = lines[lines.index(next(ln for ln in lines if ln.startswith("WORKER"))) :]
    assert table[1].split()[:5] == ["0", "f-worker-0", "Running", "gpu-node-0", "(fake)"]
    assert table[2].split()[:4] == ["1", "f-worker-1", "Running", "real-node-0"]
    assert "(fake)" not in table[2]
    assert table[3] == jobview.FAKE_NOTE and "no containers" in table[3]
    # Columns stay aligned: RESTARTS starts at one place on every row.
    at = table[0].index("RESTARTS")
    assert table[1][at] == table[2][at] == "0"
    # No fake node (or nodes the user may not read): no mark, no note.
    assert "(fake)" not in jobview.render_status(body, placed)


def test_render_status_names_the_first_failure_with_its_last_lines() -> None:
    body = ddpjob("f", "ns", nodes=2)
    body["status"] = {
        "phase": "Restarting",
        "restarts": 3,
        "uncountedRestarts": 2,
        "firstFailure": {
            "attempt": 2,
            "worker": 1,
            "localRank": 1,
            "exitCode": 1,
            "reason": "Error",
            "message": "Traceback (most recent call last):\nValueError: bad batch 17",
            "action": "RestartGroup",
            "rule": "default",
            "collateral": 1,
        },
    }
    lines = jobview.render_status(body, []).splitlines()
    assert "restarts=3 (2 not counted)" in lines[0]
    assert lines[1] == (
        "  first failure (attempt 2): worker 1 (local rank 1): exit code 1, Error; "
        "1 more failed after it; RestartGroup (default)"
    )
    assert lines[2:4] == [
        "    | Traceback (most recent call last):",
        "    | ValueError: bad batch 17",
    ]


def test_render_status_says_where_the_first_failure_s_words_came_from() -> None:
    body = ddpjob("f", "ns", nodes=1)
    first = {"worker": 0, "exitCode": 1, "action": "FailJob", "rule": "default"}
    body["status"] = {"firstFailure": {**first, "source": "Log", "message": "RuntimeError: nan"}}
    lines = jobview.render_status(body, []).splitlines()
    assert lines[1].endswith("FailJob (default); read from its log")
    assert lines[2] == "    | RuntimeError: nan"
    why = "Forbidden: the operator may not get pods/log here"
    body["status"] = {"firstFailure": {**first, "source": "TerminationMessage", "logError": why}}
    lines = jobview.render_status(body, []).splitlines()
    assert lines[1].endswith("FailJob (default)")
    assert lines[2] == f"    (its log could not be read: {why})"


def test_render_status_of_an_in_place_pod_shows_its_attempt_and_its_trainers_end() -> None:
    body = ddpjob("p", "ns", nodes=1)
    body["status"] = {"phase": "Running", "restarts": 2}
    pod = builders.build_worker_pod(resolve(body), 0, attempt=0, in_place=True)
    pod["metadata"]["annotations"]["ddp-operator.io/attempt"] = "2"
    ended = {"terminated": {"exitCode": 3, "reason": "Error"}}
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "ddp-attempt-watch", "restartCount": 2, "state": {"running": {}}},
            {"name": "trainer", "restartCount": 2, "state": ended},
        ],
    }
    row = jobview.render_status(body, [pod]).splitlines()[-1].split()
    assert row[:6] == ["0", "p-worker-0", "Failed", "-", "2", "3"], row


@pytest.mark.cluster
@pytest.mark.usefixtures("operator")
def test_status_and_logs_of_a_running_job(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("cli", namespace, nodes=2, backoffLimit=2))
    wait_running(cluster, namespace, "cli", 2)
    pods.finish(cluster, namespace, "cli-worker-1", 4)
    ws = wait_running(cluster, namespace, "cli", 2, attempt=1)
    jobs.wait_phase(cluster, namespace, "cli", "Running")

    out = ddp(cluster, "status", "cli", "-n", namespace)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "phase=Running" in lines[0] and "restarts=1" in lines[0]
    rows = [ln.replace(jobview.FAKE, "").split() for ln in lines if ln.startswith(("0 ", "1 "))]
    assert [(r[1], r[2], r[4]) for r in rows] == [
        ("cli-worker-0", "Running", "1"),
        ("cli-worker-1", "Running", "1"),
    ]
    assert {r[3] for r in rows} == {w["spec"]["nodeName"] for w in ws}
    # Where they sit on kwok's nodes, they say so.
    fake = {w["spec"]["nodeName"] for w in ws if nodes_fake(cluster, w["spec"]["nodeName"])}
    marked = {ln.split()[3] for ln in lines if ln.startswith(("0 ", "1 ")) and jobview.FAKE in ln}
    assert marked == fake
    assert (jobview.FAKE_NOTE in lines) == bool(fake)

    if cluster.local:  # the local cluster's "kubelet" serves every container log from one file
        POD_LOG.write_text(
            "2026-11-21T10:00:00.000000000Z stdout F epoch 1 loss 0.5\n"
            "2026-11-21T10:00:01.000000000Z stdout F epoch 2 loss 0.1\n"
        )
        out = ddp(cluster, "logs", "cli", "-n", namespace)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            "worker-0 | epoch 1 loss 0.5",
            "worker-0 | epoch 2 loss 0.1",
            "worker-1 | epoch 1 loss 0.5",
            "worker-1 | epoch 2 loss 0.1",
        ]
        one = ddp(cluster, "logs", "cli", "-n", namespace, "--worker", "1", "--tail", "1")
        assert one.stdout.splitlines() == ["epoch 2 loss 0.1"]

    missing = ddp(cluster, "status", "nope", "-n", namespace)
    assert missing.returncode == 1 and missing.stderr.startswith("kubectl ddp: 404 "), missing


@pytest.mark.cluster
@pytest.mark.usefixtures("operator")
def test_logs_that_cannot_be_read_fail_saying_why(cluster: Cluster, namespace: str) -> None:
    """Workers bound to a node that does not exist (a template's nodeName) have no log to give:
    `kubectl ddp logs` says the API server's answer in one line and exits 1 (each worker's log is
    read in a thread of its own, whose error once left a traceback and exit code 0)."""
    template = {
        "spec": {
            "nodeName": "ddp-test-no-such-node",
            "containers": [{"name": "trainer", "image": "python:3.11-slim"}],
        }
    }
    jobs.apply(cluster, ddpjob("unplaced", namespace, nodes=2, template=template))
    wait_for(
        lambda: len(jobs.workers(cluster, namespace, "unplaced")) == 2,
        timeout=30,
        what="two workers bound to no node",
    )
    out = ddp(cluster, "logs", "unplaced", "-n", namespace)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stderr.startswith("kubectl ddp: 404 Not Found"), out.stderr
    assert "Traceback" not in out.stderr, out.stderr


@pytest.mark.cluster
@pytest.mark.usefixtures("operator")
def test_status_says_which_workers_sit_on_fake_nodes_to_whoever_may_read_nodes(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The tests' namespaces send their pods to kwok's nodes; a user who may not read nodes gets
    the same table, unmarked."""
    jobs.apply(cluster, ddpjob("fk", namespace, nodes=2))
    ws = wait_running(cluster, namespace, "fk", 2)
    fake = {w["spec"]["nodeName"] for w in ws if nodes_fake(cluster, w["spec"]["nodeName"])}
    assert fake, "the tests' namespaces put their pods on kwok's nodes"
    out = ddp(cluster, "status", "fk", "-n", namespace)
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith(("0 ", "1 "))]
    assert {r.split()[3] for r in rows if jobview.FAKE in r} == fake
    assert out.stdout.splitlines()[-1] == jobview.FAKE_NOTE

    sa = "reader"  # may read the job, its pods and Events; not nodes
    cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
    rules = [
        {"apiGroups": [jobs.GROUP], "resources": [jobs.PLURAL], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]},
    ]
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": sa}, "rules": rules})
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": namespace}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa}
    binding = {"metadata": {"name": sa}, "subjects": [subject], "roleRef": ref}
    rbac.create_namespaced_role_binding(namespace, binding)
    kubeconfig = _sa_kubeconfig(cluster, namespace, sa, tmp_path / "reader.kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    seen = wait_for(
        lambda: (r := run_ddp("status", "fk", "-n", namespace, env=env)).returncode == 0 and r,
        timeout=30,
        what="the reader's RBAC",
    )
    assert "fk-worker-1" in seen.stdout and jobview.FAKE not in seen.stdout, seen.stdout
    assert jobview.FAKE_NOTE not in seen.stdout and not seen.stderr, seen.stderr


@pytest.mark.cluster
@pytest.mark.usefixtures("operator")
def test_submit_creates_the_job(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(ddpjob("sub", namespace, nodes=1)))
    out = ddp(cluster, "submit", str(manifest))
    assert out.returncode == 0 and f"ddpjob/sub created in {namespace}" in out.stdout, out.stderr
    wait_for(lambda: jobs.get(cluster, namespace, "sub"), timeout=10, what="the job")
    again = ddp(cluster, "submit", str(manifest))
    assert again.returncode == 1 and again.stderr.startswith("kubectl ddp: 409 "), again


def one_line_failure(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The command failed with ``code`` and said so in one line, naming ``words``."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kubectl ddp: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def run_ddp(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL_DDP, *args], env=env, capture_output=True, text=True, timeout=60)


def test_unreachable_cluster_and_missing_kubeconfig_fail_in_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    server = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    one_line_failure(run_ddp("status", "j", env=env), 1, "cannot reach the cluster", server)
    env["KUBECONFIG"] = str(tmp_path / "missing")
    one_line_failure(run_ddp("status", "j", env=env), 1, "no usable kubeconfig")


def test_bad_manifests_fail_in_one_line(tmp_path: Path) -> None:
    """With no cluster to ask: the local checks' refusals (exit 2)."""
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-cluster")}
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: DDPJob\nspec: [unclosed\n")
    one_line_failure(run_ddp("submit", str(bad_yaml), env=env), 2, "not valid YAML")
    no_resource = ddpjob("j", nodes=2, accelerator={"perNode": 2})
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(no_resource))
    one_line_failure(run_ddp("submit", str(broken), env=env), 2, "spec.accelerator.resource")
    other = tmp_path / "other.yaml"
    other.write_text("kind: ConfigMap\n")
    one_line_failure(run_ddp("submit", str(other), env=env), 2, "no DDPJob found")
    one_line_failure(run_ddp("local", str(tmp_path / "nope.yaml"), env=env), 2, "nope.yaml")


def several_failures(
    result: subprocess.CompletedProcess, code: int, *fields: str
) -> dict[str, str]:
    """The command failed with ``code``, a headline then one line per error, naming ``fields``
    (in any order); the errors by field."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    head, *errors = result.stderr.strip().splitlines()
    assert head.startswith("kubectl ddp: ") and head.endswith(f"{len(fields)} errors:"), head
    named = {e.strip().split(":")[0].split(" ")[0]: e.strip() for e in errors}
    assert sorted(named) == sorted(fields), errors
    return named


def test_submit_names_every_error_the_local_checks_find(tmp_path: Path) -> None:
    """With no cluster to ask (KUBECONFIG names no file), the local checks' list."""
    manifest = tmp_path / "three.yaml"
    body = ddpjob("three", nodes=0, backoffLimit=-1, restartStrategy="Sometimes")
    manifest.write_text(yaml.safe_dump(body))
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none")}
    result = run_ddp("submit", str(manifest), env=env)
    several_failures(result, 2, "spec.nodes", "spec.restartStrategy", "spec.backoffLimit")
    assert str(manifest) in result.stderr.splitlines()[0]


@pytest.mark.cluster
def test_submit_names_every_error_the_api_server_finds(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The local checks see one of these three (spec.nodes), the CRD all three: the API
    server's list is told (a dry run: nothing is created), as `kubectl apply` tells it; and
    one the local checks cannot see at all is told as the server says it."""
    manifest = tmp_path / "three.yaml"
    gpus = {"resource": "nvidia.com/gpu", "perNode": 200}
    body = ddpjob("three", namespace, nodes=0, masterPort=70000, accelerator=gpus)
    manifest.write_text(yaml.safe_dump(body))
    result = ddp(cluster, "submit", str(manifest))
    errors = several_failures(
        result, 1, "spec.nodes", "spec.masterPort", "spec.accelerator.perNode"
    )
    assert result.stderr.startswith("kubectl ddp: 422 ") and "70000" in errors["spec.masterPort"]
    assert jobs.get(cluster, namespace, "three") is None
    body["spec"]["nodes"] = 20000  # over the CRD's maximum: only the API server knows it
    manifest.write_text(yaml.safe_dump(body))
    result = ddp(cluster, "submit", str(manifest))
    several_failures(result, 1, "spec.nodes", "spec.masterPort", "spec.accelerator.perNode")
    assert jobs.get(cluster, namespace, "three") is None


@pytest.mark.cluster
@pytest.mark.usefixtures("crd")
def test_a_missing_job_fails_in_one_line(cluster: Cluster, namespace: str) -> None:
    for verb in ("status", "logs"):
        result = ddp(cluster, verb, "nope", "-n", namespace)
        line = one_line_failure(result, 1, "404", '"nope" not found')
        assert presence.NO_CRD not in line


@pytest.mark.cluster
def test_a_cluster_without_the_crd_is_said_so_in_one_line_by_every_subcommand(
    cluster: Cluster,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real API server's answer for a resource it does not serve: the CRD cannot be deleted
    beside the other tests, so `kubectl ddp` asks here for a group no CRD defines."""
    monkeypatch.setattr(kubeapi.Api, "resource", ("absent.ddp-operator.io", "v1alpha1", "ddpjobs"))
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(ddpjob("j", namespace)))
    flags = ("--kubeconfig", str(cluster.kubeconfig))
    for args in (
        ("status", "j", "-n", namespace),
        ("logs", "j", "-n", namespace),
        ("top", "--once", "-n", namespace),
        ("top", "-A", "--once"),
        ("submit", str(manifest)),
    ):
        code = kubectl_ddp.main([*args, *flags])
        said = capsys.readouterr()
        assert (code, said.out, said.err) == (1, "", f"kubectl ddp: {presence.NO_CRD}\n"), args


@pytest.mark.cluster
def test_a_job_no_operator_watches_is_said_so_in_one_line(
    cluster: Cluster, quiet: str, tmp_path: Path
) -> None:
    """No operator watches ``quiet``: submit waits for one's first word and says none came,
    status and top say it under the job (after a window of 2 s here, 30 s by default)."""
    env = {**cluster.env(), "DDP_PICKUP_WINDOW": "2"}
    line = (
        f"no operator has picked up ddpjob/lonely in namespace {quiet} after 2 s: "
        f"is one running and watching {quiet}?"
    )
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(ddpjob("lonely", quiet, nodes=1)))
    out = run_ddp("submit", str(manifest), env=env)
    assert out.returncode == 0 and out.stdout == f"ddpjob/lonely created in {quiet}\n", out
    assert out.stderr == f"kubectl ddp: {line}\n", out.stderr
    out = run_ddp("status", "lonely", "-n", quiet, env=env)
    assert out.returncode == 0 and out.stdout.splitlines()[1] == f"  {line}", out
    out = run_ddp("top", "--once", "-n", quiet, env=env)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == line, out
    out = run_ddp("top", "--once", "-A", env=env)
    assert out.returncode == 0 and line in out.stdout.splitlines(), out
    # Within the window, nothing is said yet (an hour: the job's age must not matter here).
    out = run_ddp(
        "status", "lonely", "-n", quiet, env={**cluster.env(), "DDP_PICKUP_WINDOW": "3600"}
    )
    assert out.returncode == 0 and "no operator" not in out.stdout, out


def test_an_elastic_job_shows_its_live_world_and_replacements() -> None:
    job = {
        "metadata": {"name": "e", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodes": 3, "minNodes": 2, "maxNodes": 3},
        "status": {"phase": "Running", "restarts": 0, "worldSize": 4, "replacements": 1},
    }
    line = jobview.render_status(job, [], now=datetime(2026, 1, 1, 0, 5, tzinfo=UTC)).splitlines()[
        0
    ]
    assert line.endswith("restarts=0  age=5m  world=4  replacements=1")


def test_render_status_shows_the_checkpoint_and_what_failures_cost() -> None:
    body = ddpjob("g", "ns", nodes=1)
    now = datetime(2026, 11, 27, 12, 0, 30, tzinfo=UTC)
    body["status"] = {
        "checkpoint": {
            "step": 10,
            "path": "/ckpt/10",
            "attempt": 0,
            "time": "2026-11-27T12:00:00Z",
        },
        "startTime": "2026-11-27T11:58:00Z",
        "progress": {"step": 135, "stepSeconds": 1.0},
        "goodput": {
            "startStep": 1,
            "lostSeconds": 15.0,
            "failures": 3,
            "stepsLost": 21,
            "restartsWithoutProgress": 2,
            "diedAt": [17, 17],
        },
        "firstFailure": {
            "worker": 0,
            "exitCode": 3,
            "action": "RestartGroup",
            "rule": "default",
            "attempt": 2,
            "lastStep": 17,
            "resumeStep": 10,
            "stepsLost": 7,
            "firstStepSeconds": 12.5,
        },
    }
    lines = jobview.render_status(body, [], now=now).splitlines()
    assert lines[2:5] == [  # under the progress line; 135 steps of 1 s in 150 s
        "  checkpoint: step 10 at /ckpt/10 (30s ago, attempt 0): restarts resume there",
        "  goodput: 3 failures cost 21 steps and 15.0s; effective training time 90.0%; 2 restarts "
        "in a row without progress (ended at steps 17, 17)",
        "  first failure (attempt 2): worker 0: exit code 3; RestartGroup (default); at step 17, "
        "7 steps lost; training again 12.5s after it",
    ]
