"""`make release` against a real registry (distribution's, on loopback: hack/cluster/registry.sh):
the operator image built by the release's own build (buildah here; Docker or Podman for most
users) and pushed, the chart pushed as an OCI artifact, Helm installing the chart from
`oci://`, and the real node's kubelet pulling the operator's image from the registry, for the
operator and for the helpers of a job's workers."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.cluster import ROOT, Cluster, tool
from harness.pages import run, user_env
from harness.realnode import NODE

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1800)]

CACHE = Path(os.environ.get("DDP_CACHE_DIR", Path.home() / ".cache" / "ddp-operator"))
VERSION = yaml.safe_load((ROOT / "charts" / "ddp-operator" / "Chart.yaml").read_text())["version"]


@pytest.fixture(scope="module")
def registry(cluster: Cluster, images: dict[str, str]) -> Iterator[str]:
    """The registry's address (HOST:PORT), the real node pulling from it."""
    up = run([str(ROOT / "hack" / "cluster" / "registry.sh"), "up"], user_env(), timeout=900)
    yield up.stdout.strip()
    run([str(ROOT / "hack" / "cluster" / "registry.sh"), "down"], user_env(), timeout=120)


def buildah_env(tmp: Path) -> dict[str, str]:
    """buildah's storage in the cache (not the host's), as image.sh keeps its own."""
    conf = tmp / "storage.conf"
    conf.write_text(
        '[storage]\ndriver = "overlay"\n'
        f'graphroot = "{CACHE}/buildah/release-storage"\nrunroot = "{CACHE}/buildah/release-run"\n'
    )
    return {"CONTAINERS_STORAGE_CONF": str(conf), "BUILDAH_ISOLATION": "chroot"}


def test_a_release_pushed_to_a_registry_installs_from_it_and_its_images_are_pulled(
    cluster: Cluster, crd: str, registry: str, tmp_path: Path
) -> None:
    env = user_env(KUBECONFIG=str(cluster.kubeconfig)) | buildah_env(tmp_path)
    env["PATH"] = f"{Path(tool('helm')).parent}{os.pathsep}{env['PATH']}"
    # Python 3.11 to build on: the local stand-in for python:3.11-slim, which no registry here
    # serves; pip in the build reaches PyPI through this host's CA (BUILD_FLAGS).
    base_tar, base = run(
        [str(ROOT / "hack" / "cluster" / "image.sh"), "base"], env, 900
    ).stdout.split()
    if subprocess.run(["buildah", "inspect", base], env=env, capture_output=True).returncode:
        run(["buildah", "pull", "--quiet", f"oci-archive:{base_tar}"], env, timeout=300)
    ca = os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    repo = f"{registry}/ml-{uuid.uuid4().hex[:6]}"
    done = run(
        ["make", "release", f"REGISTRY={repo}"],
        env
        | {
            "CONTAINER_TOOL": "buildah",
            "BASE": base,
            "BUILD_FLAGS": f"--volume {ca}:/etc/ssl/certs/ca-certificates.crt:ro",
            "IMAGES": "operator",
            "PLAIN_HTTP": "1",
        },
        timeout=1200,
    )
    assert f"pushed {repo}/ddp-operator:{VERSION} and oci://{repo}/charts" in done.stderr, (
        done.stderr
    )

    name = f"rg-{uuid.uuid4().hex[:6]}"
    ns, system = f"{name}-jobs", f"{name}-system"
    cluster.core.create_namespace({"metadata": {"name": ns}})
    helm = [tool("helm"), "--kubeconfig", str(cluster.kubeconfig)]
    try:
        run(
            [
                *helm,
                "install",
                name,
                f"oci://{repo}/charts/ddp-operator",
                "--version",
                VERSION,
                "--plain-http",
                "-n",
                system,
                "--create-namespace",
                "--set",
                f"image.repository={repo}/ddp-operator",
                "--set",
                f"watchNamespaces={{{ns}}}",
                # The registry listens on this host's loopback, which real-node-1's network
                # namespace does not share: everything that pulls from it on real-node-0.
                "--set-string",
                f"nodeSelector.kubernetes\\.io/hostname={NODE}",
                "--wait",
                "--timeout",
                "5m",
            ],
            env,
            timeout=400,
        )
        (operator,) = cluster.core.list_namespaced_pod(
            system, label_selector="app.kubernetes.io/name=ddp-operator"
        ).items
        (status,) = operator.status.container_statuses
        assert status.image_id.startswith(f"{repo}/ddp-operator@sha256:"), status.image_id

        job = yaml.safe_load((ROOT / "examples" / "cpu-job.yaml").read_text())
        job["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))
        cluster.kubectl(
            "wait", "-n", ns, "--for=condition=Succeeded", "--timeout=300s", "ddpjob/hello-ddp"
        )
        for pod in cluster.core.list_namespaced_pod(
            ns, label_selector="ddp-operator.io/job-name=hello-ddp"
        ).items:
            helpers = {s.name: s.image_id for s in pod.status.init_container_statuses or []}
            assert helpers.get("ddp-helpers", "").startswith(f"{repo}/ddp-operator@sha256:"), (
                helpers
            )
    finally:
        subprocess.run(
            [*helm, "uninstall", name, "-n", system, "--wait"], capture_output=True, timeout=300
        )
        for n in (ns, system):
            cluster.kubectl("delete", "namespace", n, "--wait=false", check=False)
        # This build's image and its steps' layers go; the base stays for the next run.
        subprocess.run(
            ["buildah", "rmi", "-f", f"{repo}/ddp-operator:{VERSION}"],
            env=env,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(["buildah", "rmi", "--prune"], env=env, capture_output=True, timeout=120)
