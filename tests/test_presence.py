"""A cluster not set up for DDPJobs, said in one line (decide/presence.py): no CRD (the API
server's 404 for the resource itself, not for one job), or a job no operator has picked up.
The verdicts, then `kubectl ddp` and the SDK against API clients that answer as such a cluster
does (the same against the real API server: test_kubectl_ddp.py, test_sdk.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import V1PodList
from kubernetes.client.exceptions import ApiException

from ddp_operator.commands import jobview, kubeapi, kubectl_ddp, topview
from ddp_operator.decide import presence
from ddp_operator.sdk import Client, SDKError

from jobs import ddpjob

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
PAGE_NOT_FOUND = "404 page not found\n"  # what the API server says of a path it does not serve
JOB_NOT_FOUND = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'ddpjobs.ddp-operator.io "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "ddp-operator.io", "kind": "ddpjobs"},
        "code": 404,
    }
)
LONG_AGO = "2020-01-01T00:00:00Z"  # for the commands, which read this machine's clock
UNHEARD = (
    "no operator has picked up ddpjob/j in namespace team after 30 s: "
    "is one running and watching team?"
)


def created(seconds_ago: float, **status: Any) -> dict[str, Any]:
    """Job ``j`` of namespace ``team``, created ``seconds_ago`` before NOW, with ``status``."""
    job = ddpjob("j", "team", nodes=2)
    stamp = NOW - timedelta(seconds=seconds_ago)
    job["metadata"]["creationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    if status:
        job["status"] = status
    return job


def test_only_a_404_of_the_resource_itself_says_the_crd_is_missing() -> None:
    assert presence.crd_missing(404, PAGE_NOT_FOUND)
    assert presence.crd_missing(404, PAGE_NOT_FOUND.encode())
    # A Status without a name: the aggregator's "could not find the requested resource".
    assert presence.crd_missing(404, json.dumps({"kind": "Status", "reason": "NotFound"}))
    assert not presence.crd_missing(404, JOB_NOT_FOUND)  # one job: its own message
    assert not presence.crd_missing(403, PAGE_NOT_FOUND)
    assert not presence.crd_missing(None, None)
    assert presence.NO_CRD == (
        "the DDPJob CRD (ddpjobs.ddp-operator.io) is not installed on this cluster: "
        "helm install ddp-operator charts/ddp-operator ... or kubectl apply -f crds/"
    )


def test_a_job_no_operator_has_spoken_to_after_the_window_is_unheard() -> None:
    assert presence.unheard(created(31), NOW) == UNHEARD
    assert presence.unheard(created(29), NOW) is None  # not yet
    assert presence.unheard(created(3), NOW, 2) == UNHEARD.replace("30 s", "2 s")
    assert presence.unheard(created(3), NOW, 0.5) == UNHEARD.replace("30 s", "0.5 s")
    # Any word from an operator: a phase, or a condition.
    assert presence.unheard(created(3600, phase="Pending"), NOW) is None
    assert presence.unheard(created(3600, conditions=[{"type": "Created"}]), NOW) is None
    assert presence.unheard(created(3600, progress={"step": 1}), NOW) == UNHEARD
    # A job another controller manages (MultiKueue writes its status once it runs elsewhere).
    sent = created(3600)
    sent["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert presence.unheard(sent, NOW) is None and not presence.awaits_operator(sent)
    ours = created(3600)
    ours["spec"]["managedBy"] = "ddp-operator.io/ddp-operator"
    assert presence.unheard(ours, NOW) == UNHEARD
    no_stamp = created(3600)
    del no_stamp["metadata"]["creationTimestamp"]
    assert presence.unheard(no_stamp, NOW) is None


def test_the_window_is_30_s_unless_the_environment_says_otherwise() -> None:
    assert presence.window({}) == 30.0
    assert presence.window({"DDP_PICKUP_WINDOW": "2"}) == 2.0
    assert presence.window({"DDP_PICKUP_WINDOW": "soon"}) == 30.0
    assert presence.window({"DDP_PICKUP_WINDOW": "-1"}) == 30.0


def test_status_and_top_say_so_under_the_job() -> None:
    lines = jobview.render_status(created(60), [], now=NOW).splitlines()
    assert lines[0].startswith("ddpjob/j  phase=Pending") and lines[1] == f"  {UNHEARD}"
    assert UNHEARD not in jobview.render_status(created(60, phase="Pending"), [], now=NOW)
    assert UNHEARD not in jobview.render_status(created(60), [], now=NOW, window=120)
    table = topview.render_top([created(60), created(60, phase="Running")], NOW).splitlines()
    assert table[-1] == UNHEARD and sum(UNHEARD in line for line in table) == 1
    assert UNHEARD not in topview.render_top([created(5)], NOW)


class Cluster:
    """The DDPJob API of a cluster as a CustomObjectsApi: ``served`` False is a cluster without
    the CRD (every call a 404 page not found); else it holds ``jobs`` by name, and a job it
    creates is ``made``, else the body created in 2020 (no status: no operator)."""

    def __init__(self, served: bool = True, made: dict[str, Any] | None = None) -> None:
        self.served, self.jobs, self.made = served, {}, made
        self.calls: list[str] = []

    def __getattr__(self, verb: str) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            self.calls.append(verb)
            if not self.served:
                raise _404(PAGE_NOT_FOUND)
            if verb.startswith("list_"):
                return {"items": list(self.jobs.values())}
            if verb == "create_namespaced_custom_object":
                body = args[-1]
                meta = {**body["metadata"], "creationTimestamp": LONG_AGO}
                made = self.made or {**body, "metadata": meta}
                self.jobs[made["metadata"]["name"]] = made
                return made
            if args[-1] not in self.jobs:
                raise _404(JOB_NOT_FOUND)
            return self.jobs[args[-1]]

        return call


def _404(body: str) -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = body
    return exc


class Pods:
    def list_namespaced_pod(self, *args: Any, **kw: Any) -> V1PodList:
        return V1PodList(items=[])


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose server nobody asks: the API clients are replaced."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def kubectl_ddp_on(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Any:
    """`kubectl ddp` run in this process against ``cluster``: (exit status, stdout, stderr)."""

    class Api(kubeapi.Api):
        def __init__(self, kubeconfig: str | None, context: str | None) -> None:
            super().__init__(kubeconfig, context)
            self.custom, self.core = cluster, Pods()

    monkeypatch.setattr(kubectl_ddp, "Api", Api)

    def run(*args: str) -> tuple[int, str, str]:
        code = kubectl_ddp.main(args)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_every_subcommand_says_the_crd_is_missing_in_one_line(
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(ddpjob("j", "team")))
    run = kubectl_ddp_on(Cluster(served=False), monkeypatch, capsys)
    flags = ("--kubeconfig", str(kubeconfig))
    for args in (
        ("status", "j", "-n", "team"),
        ("logs", "j"),
        ("top", "--once"),
        ("top", "-A", "--once"),
        ("submit", str(manifest)),
    ):
        assert run(*args, *flags) == (1, "", f"kubectl ddp: {presence.NO_CRD}\n"), args
    # A job that does not exist on a cluster with the CRD keeps its own message.
    code, _, err = kubectl_ddp_on(Cluster(), monkeypatch, capsys)("status", "nope", *flags)
    assert code == 1 and '404 Not Found: ddpjobs.ddp-operator.io "nope" not found' in err, err
    assert presence.NO_CRD not in err


def test_status_logs_top_and_submit_say_no_operator_picked_the_job_up(
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = Cluster()
    run = kubectl_ddp_on(cluster, monkeypatch, capsys)
    flags = ("-n", "team", "--kubeconfig", str(kubeconfig))
    line = UNHEARD.replace("30 s", "2 s")
    monkeypatch.setenv("DDP_PICKUP_WINDOW", "2")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(ddpjob("j", "team")))
    assert run("submit", str(manifest), *flags) == (
        0,
        "ddpjob/j created in team\n",
        f"kubectl ddp: {line}\n",
    )
    code, out, err = run("status", "j", *flags)
    assert code == 0 and out.splitlines()[1] == f"  {line}" and not err, (out, err)
    code, out, err = run("top", "--once", *flags)
    assert code == 0 and out.splitlines()[-1] == line and not err, (out, err)
    assert run("logs", "j", *flags) == (0, "", f"{line}\n")
    # Picked up: submit says nothing more; --no-wait does not ask.
    cluster.made = {
        **cluster.jobs["j"],
        "status": {"phase": "Pending", "conditions": [{"type": "Created"}]},
    }
    assert run("submit", str(manifest), *flags) == (0, "ddpjob/j created in team\n", "")
    asked = len(cluster.calls)
    assert run("submit", str(manifest), "--no-wait", *flags)[0] == 0
    assert cluster.calls[asked:] == ["create_namespaced_custom_object"]


def test_the_sdk_says_the_crd_is_missing_and_no_operator_in_its_timeout(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(namespace="team", kubeconfig=str(kubeconfig))
    client.custom = Cluster(served=False)
    for call in (lambda: client.get("j"), client.list, lambda: client.submit(ddpjob("j"))):
        with pytest.raises(SDKError) as raised:
            call()
        assert str(raised.value) == presence.NO_CRD and raised.value.status == 404
    client.custom = cluster = Cluster()
    with pytest.raises(SDKError, match=r'get_namespaced_custom_object: 404 .*"nope" not found'):
        client.get("nope")
    cluster.jobs["j"] = job = ddpjob("j", "team")
    job["metadata"]["creationTimestamp"] = LONG_AGO
    client.pickup_window = 2
    expected = f"ddpjob j is Pending, not Succeeded, after 0 s: {UNHEARD.replace('30 s', '2 s')}"
    with pytest.raises(TimeoutError) as raised:
        client.wait("j", timeout=0)
    assert str(raised.value) == expected
    job["status"] = {"phase": "Pending"}
    with pytest.raises(TimeoutError, match=r"^ddpjob j is Pending, not Succeeded, after 0 s$"):
        client.wait("j", timeout=0)
