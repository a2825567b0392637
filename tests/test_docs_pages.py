"""The pages a newcomer follows first, run as written against the local cluster: the local
cluster page's commands (`make demo`, then its ```bash blocks; `make demo` again in the shell
the first one set up) and the SDK page's ```python snippets, each taken from the Markdown, not
copied here."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cluster import ROOT, Cluster, tool
from harness.pages import blocks, run, user_env
from harness.podwatch import PodWatch, worker_key
from harness.realnode import NODE, NODE_1

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1800)]

LOCAL_PAGE = ROOT / "docs" / "getting-started" / "local.md"
SDK_PAGE = ROOT / "docs" / "tasks" / "sdk.md"
RELEASE, SYSTEM = "ddp-operator", "ddp-system"  # what make demo installs (hack/demo.sh)


@pytest.fixture(scope="module")
def demo(cluster: Cluster, crd: str, images: dict[str, str]) -> Iterator[str]:
    """`make demo`, the page's first command, on the session's cluster; its output. The chart's
    operator it installs stays for the module, and goes after it unless it was there before."""
    if not cluster.local:
        pytest.skip("the local cluster's pages")
    first = blocks(LOCAL_PAGE, "console")[0].splitlines()[0]
    assert first.startswith("make demo "), first
    helm = [tool("helm"), "--kubeconfig", str(cluster.kubeconfig)]
    installed = subprocess.run([*helm, "status", RELEASE, "-n", SYSTEM], capture_output=True)
    done = run(["make", "demo"], user_env(), timeout=1500)
    try:
        yield done.stdout
    finally:
        if installed.returncode != 0:
            subprocess.run([*helm, "uninstall", RELEASE, "-n", SYSTEM, "--wait"], timeout=300)
            cluster.kubectl("delete", "namespace", "ddp-demo", SYSTEM, "--wait=false", check=False)


def test_make_demo_leaves_an_operator_and_says_what_next(demo: str) -> None:
    assert "ddpjob/hello-ddp Succeeded" in demo, demo[-3000:]
    assert "The cluster and the operator keep running" in demo, demo[-3000:]
    assert "make cluster-down" in demo


def exported(demo: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` after the `export KUBECONFIG=... PATH=...:$PATH` line `make demo` prints."""
    line = next(x.strip() for x in demo.splitlines() if x.strip().startswith("export KUBECONFIG="))
    for word in line.removeprefix("export ").split():
        key, value = word.split("=", 1)
        env = env | {key: value.replace("$PATH", env["PATH"])}
    return env


def test_make_demo_again_in_the_shell_it_set_up_keeps_the_operator(
    cluster: Cluster, demo: str
) -> None:
    """The printed export run, then `make demo` again: the local cluster is recognised by its
    kubeconfig, and the chart's operator is installed again and stays, as on a first run."""
    env = exported(demo, user_env())
    assert Path(env["KUBECONFIG"]).resolve() == cluster.kubeconfig.resolve(), env["KUBECONFIG"]
    again = run(["make", "demo"], env, timeout=900).stdout
    assert "names the local cluster" in again and "for this demo only" not in again, again
    assert "ddpjob/hello-ddp Succeeded" in again, again[-3000:]
    assert "The cluster and the operator keep running" in again, again[-3000:]
    ready = cluster.kubectl(
        "rollout", "status", f"deployment/{RELEASE}", "-n", SYSTEM, "--timeout=60s"
    )
    assert "successfully rolled out" in ready.stdout, ready.stdout


class Placements(PodWatch):
    """Where each job's workers in the namespace were placed: job -> {pod: (node, selector)}."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        super().__init__(cluster, ns)
        self.placed: dict[str, dict[str, tuple[str, dict]]] = {}

    def relisted(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self.changed("ADDED", pod)

    def changed(self, type_: str, pod: dict[str, Any]) -> None:
        key, spec = worker_key(pod), pod.get("spec") or {}
        if key and spec.get("nodeName"):
            placed = self.placed.setdefault(key[0], {})
            placed[pod["metadata"]["name"]] = (spec["nodeName"], spec.get("nodeSelector") or {})


@pytest.fixture(scope="module")
def page_run(cluster: Cluster, demo: str) -> tuple[str, Placements]:
    """The local cluster page's ```bash blocks, run as one script in a user's shell (it applies
    the examples, waits for them and deletes them); its output, and where their workers ran."""
    script = "\n".join(blocks(LOCAL_PAGE, "bash"))
    assert "kubectl apply" in script, script
    for job in ("hello-ddp", "train-cpu"):  # left by an earlier run that failed
        cluster.kubectl("delete", "ddpjob", job, "-n", "default", "--ignore-not-found")
    placements = Placements(cluster, "default").start()
    try:
        done = run(["bash", "-euo", "pipefail", "-c", script], user_env(), timeout=900)
    finally:
        placements.stop()
    return done.stdout, placements


def test_the_local_cluster_page_runs_as_written(cluster: Cluster, page_run: tuple) -> None:
    out, _ = page_run
    assert "all_reduce ok" in out and "TRAINED" in out, out
    assert "real-node-0" in out, out
    left = cluster.kubectl("get", "ddpj", "-n", "default", "-o", "name").stdout
    assert "hello-ddp" not in left and "train-cpu" not in left, left


# The examples meant to run on the local cluster, which the page applies as written: (file, job).
EXAMPLES = [("cpu-job.yaml", "hello-ddp"), ("train-cpu.yaml", "train-cpu")]


@pytest.mark.parametrize(("example", "name"), EXAMPLES, ids=[f for f, _ in EXAMPLES])
def test_the_examples_run_as_written_on_the_local_cluster(
    page_run: tuple, example: str, name: str
) -> None:
    """Each example the page applies (it waits for each to succeed) had all its workers on the
    real nodes, none of them asking for a node; hello-ddp's (its spread preference) on both."""
    out, placements = page_run
    assert f"ddpjob.ddp-operator.io/{name} condition met" in out, out
    nodes = yaml.safe_load((ROOT / "examples" / example).read_text())["spec"]["nodes"]
    placed = placements.placed.get(name, {})
    assert sorted(placed) == [f"{name}-worker-{i}" for i in range(nodes)], placed
    real = (NODE, NODE_1)
    assert all(node in real and not selector for node, selector in placed.values()), placed
    if name == "hello-ddp":
        assert sorted(node for node, _ in placed.values()) == [NODE, NODE_1], placed


def test_the_sdk_page_runs_as_written(cluster: Cluster, demo: str) -> None:
    snippets = blocks(SDK_PAGE, "python")
    assert snippets
    env = user_env() | {"KUBECONFIG": str(cluster.kubeconfig)}
    before = set(cluster.kubectl("get", "ddpj", "-n", "default", "-o", "name").stdout.split())
    for snippet in snippets:
        run([sys.executable, "-c", snippet], env, timeout=600)
    after = set(cluster.kubectl("get", "ddpj", "-n", "default", "-o", "name").stdout.split())
    assert after <= before, f"the snippets left {after - before}"
