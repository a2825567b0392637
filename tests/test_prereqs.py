"""hack/prereqs.sh, the first step of make demo, make test and make cluster-up: a missing tool
stops the target at once, named with how to get it, before anything is built; as root on Debian
it is installed instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.cluster import ROOT

PREREQS = ROOT / "hack" / "prereqs.sh"


def path_without(tmp: Path, hidden: str) -> str:
    """A PATH of one directory holding every command of this PATH but ``hidden``."""
    shown = tmp / "bin"
    shown.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = os.path.join(folder, name)
            if name != hidden and not (shown / name).exists() and os.access(target, os.X_OK):
                (shown / name).symlink_to(target)
    return str(shown)


def run(args: list[str], **env: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )
    return done, time.monotonic() - started


@pytest.mark.skipif(shutil.which("socat") is None, reason="socat must be there to be hidden")
def test_a_hidden_tool_stops_make_cluster_up_at_once_naming_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"PATH": path_without(tmp_path, "socat"), "DDP_PREREQS_INSTALL": "0"}
    env |= {"DDP_CACHE_DIR": str(cache), "DDP_REAL_NODE": "1"}
    done, took = run(["make", "--no-print-directory", "cluster-up"], **env)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "make cluster cannot run here; missing:" in done.stderr, done.stderr
    assert "socat: apt-get install socat" in done.stderr, done.stderr
    assert took < 5, f"{took:.1f}s"
    assert list(cache.iterdir()) == []  # nothing was built before it stopped
    # The same check passes with the tool in sight (root: the real node's needs too).
    if os.geteuid() == 0:
        done, _ = run([str(PREREQS), "cluster"], DDP_PREREQS_INSTALL="0")
        assert done.returncode == 0, done.stderr


def test_without_a_local_cluster_go_and_the_real_nodes_tools_are_not_asked_for(
    tmp_path: Path,
) -> None:
    """With KUBECONFIG set (another cluster), make test needs no Go and no real node."""
    env = {"PATH": path_without(tmp_path, "go"), "DDP_PREREQS_INSTALL": "0"}
    done, _ = run([str(PREREQS), "test"], KUBECONFIG="/dev/null", **env)
    assert done.returncode == 0 or "go:" not in done.stderr, done.stderr
    assert "socat" not in done.stderr and "buildah" not in done.stderr, done.stderr
    done, _ = run([str(PREREQS), "test"], **env, KUBECONFIG="")
    assert done.returncode != 0 and "  go: Go " in done.stderr, done.stderr


def installed(package: str) -> bool:
    found = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
    )
    return found.stdout.endswith("installed") and not found.stdout.startswith("deinstall")


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("apt-get") is None or not os.environ.get("CI"),
    reason="removes and installs a Debian package: root on Debian, in CI only (CI=true)",
)
def test_as_root_on_debian_a_missing_tool_is_installed() -> None:
    """shellcheck (make lint's, run before the tests) is removed, then make test's check
    installs it again from Debian's packages."""
    assert installed("shellcheck")
    subprocess.run(["apt-get", "remove", "-y", "-q", "shellcheck"], check=True, capture_output=True)
    assert shutil.which("shellcheck") is None
    done, _ = run([str(PREREQS), "test"], KUBECONFIG="/dev/null")
    assert done.returncode == 0, done.stderr
    assert "installing from Debian's packages: shellcheck" in done.stderr, done.stderr
    assert shutil.which("shellcheck") is not None and installed("shellcheck")
