"""The install and upgrade pages run as written against the local cluster as if it were the
user's: docs/getting-started/your-cluster.md from nothing to a job Succeeded and back to
nothing, and docs/operations/upgrades.md from the previous release, built from its git tag, to
this tree, with a job running across the upgrade. `make release`'s registry is the local
cluster's real node (DDP_RELEASE_TO=local-cluster: the images get the release's names there and
are never pulled); nothing else differs from what a user runs.

Serial: the pages install the release `ddp-operator` in `ddp-system` (the name `make demo` uses:
a release found there is set aside and put back), and the upgrade test puts the previous
release's CRD in place for the whole cluster."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cluster import ROOT, Cluster, tool, wait_for
from harness.pages import blocks, run_blocks, user_env
from harness.realnode import touch

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.serial, pytest.mark.timeout(2400)]

INSTALL_PAGE = ROOT / "docs" / "getting-started" / "your-cluster.md"
UPGRADE_PAGE = ROOT / "docs" / "operations" / "upgrades.md"
RELEASE, SYSTEM, TEAM = "ddp-operator", "ddp-system", "team-a"  # the pages' names
REGISTRY = "registry.example.com/ml"  # the install page's example, kept as it is
# The previous release, by its tag's commit: a clone without tags still finds it.
PREVIOUS = ("0.2.0", "a582f7dda9b6199e4d5f693ced9c30915134b9d8")
CACHE = Path(os.environ.get("DDP_CACHE_DIR", Path.home() / ".cache" / "ddp-operator"))
# A job that joins its process group, then waits for /tmp/go in each worker before its
# all_reduce: it runs until the test lets it finish.
ACROSS = """
apiVersion: ddp-operator.io/v1alpha1
kind: DDPJob
metadata: {name: across}
spec:
  nodes: 2
  backoffLimit: 1
  template:
    spec:
      containers:
      - name: trainer
        image: ddp-operator/trainer:cpu
        command: [python, -c]
        args:
        - |
          import os, pathlib, time, torch, torch.distributed as dist
          dist.init_process_group(os.environ["DDP_BACKEND"], init_method="env://")
          print("JOINED", flush=True)
          while not pathlib.Path("/tmp/go").exists():
              time.sleep(0.2)
          t = torch.ones(1)
          dist.all_reduce(t)
          print(f"DONE {t.item():.0f}", flush=True)
          dist.destroy_process_group()
"""


def helm(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [tool("helm"), "--kubeconfig", str(cluster.kubeconfig), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert not check or done.returncode == 0, f"helm {args[:2]}: {done.stderr[-2000:]}"
    return done


def page_env(cluster: Cluster) -> dict[str, str]:
    """A user's shell: the local cluster's kubectl and helm first on PATH, its kubeconfig, and
    `make release` told to use the local cluster for the registry."""
    env = user_env(KUBECONFIG=str(cluster.kubeconfig), DDP_RELEASE_TO="local-cluster")
    env["PATH"] = f"{Path(tool('kubectl')).parent}{os.pathsep}{env['PATH']}"
    return env


def gone(cluster: Cluster, *namespaces: str) -> None:
    """The namespaces deleted and gone (left by a run that failed)."""
    for ns in namespaces:
        cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
    wait_for(
        lambda: (
            not any(
                cluster.kubectl("get", "namespace", ns, check=False).returncode == 0
                for ns in namespaces
            )
        ),
        timeout=300,
        interval=1,
        what=f"namespaces {namespaces} gone",
    )


@pytest.fixture(scope="module")
def room(cluster: Cluster, crd: str, images: dict[str, str]) -> Iterator[None]:
    """No release `ddp-operator` in `ddp-system` and no `team-a` while the pages run: a release
    there (`make demo`'s) is uninstalled first and installed again after, with its values."""
    if not cluster.local:
        pytest.skip("`make release` stands in for a registry on the local cluster only")
    saved = None
    if helm(cluster, "status", RELEASE, "-n", SYSTEM, check=False).returncode == 0:
        values = yaml.safe_load(helm(cluster, "get", "values", RELEASE, "-n", SYSTEM).stdout)
        if (values or {}).get("watchNamespaces") != [TEAM]:  # not a failed run's own
            saved = values
        helm(cluster, "uninstall", RELEASE, "-n", SYSTEM, "--wait")
    gone(cluster, TEAM)
    try:
        yield
    finally:
        helm(cluster, "uninstall", RELEASE, "-n", SYSTEM, "--wait", check=False)
        gone(cluster, TEAM)
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        if saved is not None:
            values_file = CACHE / "demo-release-values.yaml"
            values_file.write_text(yaml.safe_dump(saved))
            helm(
                cluster,
                "install",
                RELEASE,
                str(ROOT / "charts" / "ddp-operator"),
                "-n",
                SYSTEM,
                "--create-namespace",
                "-f",
                str(values_file),
                "--wait",
            )


def test_the_install_page_runs_as_written_from_nothing_to_a_job_and_back(
    cluster: Cluster, room: None
) -> None:
    out = run_blocks(blocks(INSTALL_PAGE, "console"), page_env(cluster), timeout=1200)
    assert "condition met" in out and "all_reduce ok" in out, out[-4000:]
    assert f"{REGISTRY}/ddp-operator:" in out, out[-4000:]
    # Back to nothing: no release, no namespaces, nothing of the release's cluster-wide, the
    # CRD left as the page says.
    assert helm(cluster, "status", RELEASE, "-n", SYSTEM, check=False).returncode != 0
    for ns in (TEAM, SYSTEM):
        assert cluster.kubectl("get", "namespace", ns, check=False).returncode != 0, ns
    left = cluster.kubectl(
        "get",
        "clusterroles,clusterrolebindings",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
        "-o",
        "name",
    ).stdout
    assert not left.strip(), left
    cluster.kubectl("get", "crd", "ddpjobs.ddp-operator.io")


def previous_release(cluster: Cluster) -> Path:
    """The previous release's tree (its tag's commit), with its operator image built and named
    as `make release` names it. That tree had no `make release`: this tree's release tooling
    builds it (the build is the release's Dockerfile and files)."""
    version, commit = PREVIOUS
    tagged = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"v{version}^{{commit}}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert tagged in ("", commit), f"tag v{version} is {tagged}, not the release {commit}"
    tree = CACHE / "releases" / f"{version}-{commit[:12]}"
    if not (tree / ".git").exists():
        subprocess.run(["rm", "-rf", str(tree)], check=True)
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(tree)], check=True)
        subprocess.run(
            ["git", "-C", str(tree), "-c", "advice.detachedHead=false", "checkout", "-q", commit],
            check=True,
        )
    for tooling in ("hack/release.sh", "hack/cluster/image.sh", "hack/cluster/ociimage.py"):
        (tree / tooling).parent.mkdir(parents=True, exist_ok=True)
        (tree / tooling).write_bytes((ROOT / tooling).read_bytes())
        (tree / tooling).chmod(0o755)
    env = page_env(cluster) | {
        "REGISTRY": REGISTRY,
        "IMAGES": "operator",
        "DDP_REALNODE": str(ROOT / "hack" / "cluster" / "realnode.sh"),
    }
    done = subprocess.run(
        [str(tree / "hack" / "release.sh")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == f"{REGISTRY}/ddp-operator:{version}", done.stdout
    return tree


def trainer_exit(pod: Any) -> int | None:
    """The exit code of the pod's trainer container, once it has ended."""
    for status in pod.status.container_statuses or []:
        if status.name == "trainer" and status.state.terminated:
            return status.state.terminated.exit_code
    return None


def test_an_upgrade_from_the_previous_release_as_the_page_says_keeps_a_running_job(
    cluster: Cluster, room: None
) -> None:
    previous = previous_release(cluster)
    # The previous release installed as its own page said, with the CRD it installed.
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(previous / "charts" / "ddp-operator" / "crds"),
    )
    cluster.kubectl("create", "namespace", TEAM)
    helm(
        cluster,
        "install",
        RELEASE,
        str(previous / "charts" / "ddp-operator"),
        "-n",
        SYSTEM,
        "--create-namespace",
        "--set",
        f"image.repository={REGISTRY}/ddp-operator",
        "--set",
        f"watchNamespaces={{{TEAM}}}",
        "--wait",
        "--timeout",
        "5m",
    )
    cluster.kubectl("apply", "-n", TEAM, "-f", "-", input=ACROSS)

    def job() -> dict:
        return cluster.custom.get_namespaced_custom_object(
            "ddp-operator.io", "v1alpha1", TEAM, "ddpjobs", "across"
        )

    def joined() -> bool:
        logs = [
            cluster.kubectl(
                "logs", "-n", TEAM, f"across-worker-{i}", "-c", "trainer", check=False
            ).stdout
            for i in range(2)
        ]
        return (
            all("JOINED" in log for log in logs)
            and job().get("status", {}).get("phase") == "Running"
        )

    wait_for(joined, timeout=300, interval=1, what="the job running under the previous release")
    before = job()["status"]
    pods = {
        p.metadata.name: p.metadata.uid
        for p in cluster.core.list_namespaced_pod(
            TEAM, label_selector="ddp-operator.io/job-name=across"
        ).items
    }
    assert len(pods) == 2, pods

    # The upgrade, as the page's steps say.
    out = run_blocks(
        blocks(UPGRADE_PAGE, "console", section="Upgrade the operator"),
        page_env(cluster) | {"REGISTRY": REGISTRY},
        timeout=1200,
    )
    assert "successfully rolled out" in out, out[-4000:]
    deployment = cluster.kubectl("get", "deployment", RELEASE, "-n", SYSTEM, "-o", "yaml").stdout
    version = yaml.safe_load((ROOT / "charts" / "ddp-operator" / "Chart.yaml").read_text())[
        "version"
    ]
    assert f"{REGISTRY}/ddp-operator:{version}" in deployment

    for name in pods:
        touch(cluster, TEAM, name, "/tmp/go")
    wait_for(
        lambda: job().get("status", {}).get("phase") in ("Succeeded", "Failed"),
        timeout=300,
        interval=1,
        what="the job finished under the new release",
    )
    after = job()["status"]
    assert after["phase"] == "Succeeded", after
    # The same pods ran it to the end (nothing restarted), and what the previous release wrote
    # is still there.
    now = {
        p.metadata.name: (p.metadata.uid, trainer_exit(p))
        for p in cluster.core.list_namespaced_pod(
            TEAM, label_selector="ddp-operator.io/job-name=across"
        ).items
    }
    assert now == {name: (uid, 0) for name, uid in pods.items()}, now
    assert after["startTime"] == before["startTime"], (before, after)
    assert after.get("restarts", 0) == before.get("restarts", 0) == 0, (before, after)
    kept = {c["type"] for c in before.get("conditions", [])}
    assert kept <= {c["type"] for c in after.get("conditions", [])}, (before, after)
    log = cluster.kubectl("logs", "-n", TEAM, "across-worker-1", "-c", "trainer").stdout
    assert "DONE 2" in log, log
