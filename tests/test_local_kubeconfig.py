"""hack/is-local-cluster.sh, which make demo asks which path to take: the local cluster is
recognised whatever KUBECONFIG says (unset, the same file, the same server), so that a second
`make demo` in the shell the first one set up leaves the chart's operator running again (the
whole of it, run twice: test_docs_pages.py). Run here on a copy in a checkout of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.cluster import ROOT

SCRIPT = ROOT / "hack" / "is-local-cluster.sh"
LOCAL_SERVER = "https://127.0.0.1:20443"


def kubeconfig(path: Path, server: str, context: str = "x") -> Path:
    """A kubeconfig of one context, ``context``, current, on ``server``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": context, "cluster": {"server": server}}],
                "users": [{"name": context, "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
                "current-context": context,
            }
        )
    )
    return path


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout holding only the script; its .cluster/kubeconfig is the caller's to write."""
    (tmp_path / "hack").mkdir()
    shutil.copy2(SCRIPT, tmp_path / "hack" / SCRIPT.name)
    return tmp_path


def local(checkout: Path, kubeconfig: str | None, cwd: Path | None = None) -> bool:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = kubeconfig
    done = subprocess.run(
        [str(checkout / "hack" / SCRIPT.name)],
        env=env,
        cwd=cwd or checkout,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def test_unset_or_the_same_file_is_the_local_cluster_even_while_it_is_down(
    checkout: Path,
) -> None:
    """The cluster down (cluster.sh down removes its kubeconfig): no server to compare, the
    path alone says it."""
    own = checkout / ".cluster" / "kubeconfig"
    assert local(checkout, None) and local(checkout, "")
    assert local(checkout, str(own))
    assert local(checkout, ".cluster/../.cluster/kubeconfig")  # relative, from the checkout
    (checkout / "link").symlink_to(checkout / ".cluster", target_is_directory=True)
    assert local(checkout, str(checkout / "link" / "kubeconfig"))
    assert not local(checkout, str(checkout / "other"))


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="compares servers with kubectl")
def test_another_kubeconfig_is_the_local_cluster_only_on_its_server(
    checkout: Path, tmp_path: Path
) -> None:
    kubeconfig(checkout / ".cluster" / "kubeconfig", LOCAL_SERVER)
    same = kubeconfig(tmp_path / "copied", LOCAL_SERVER, context="renamed")
    other = kubeconfig(tmp_path / "kind", "https://127.0.0.1:6443")
    assert local(checkout, str(same))
    assert not local(checkout, str(other))
    assert local(checkout, f"{same}:{other}")  # a list: its current context's server
    assert not local(checkout, f"{other}:{same}")
    assert not local(checkout, str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("apiVersion: v1\nkind: Config\n")  # no current context
    assert not local(checkout, str(empty))
