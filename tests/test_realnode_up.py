"""`make cluster-up` run again and again, as users do: a second up restarts nothing and awaits
no node but the fake ones it creates again; no wait of `realnode.sh up` counts a build (the
first `make demo` on a fresh machine once failed so: its deadline had passed while the node's
binaries built); a failed up stops what it started; the node's daemons hold none of their
caller's open files; ups at once take turns."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from harness import nodes
from harness.cluster import CLUSTER_SH, ROOT, Cluster, wait_for
from harness.realnode import REALNODE_SH

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(900), pytest.mark.serial]

RN = ROOT / ".cluster" / "realnode"
DAEMONS = ("containerd", "kubelet", "kube-proxy", "coredns", "api-forward", "netpol")
PROXY_RESTART = "content of the proxy server's configuration file was updated"


def pids() -> dict[str, int]:
    """The node's running daemons and their pids."""
    found = {}
    for name in DAEMONS:
        pidfile = RN / f"{name}.pid"
        if pidfile.exists() and Path(f"/proc/{pidfile.read_text().strip()}").exists():
            found[name] = int(pidfile.read_text())
    return found


def stop_kube_proxy() -> None:
    pid = pids()["kube-proxy"]
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what="kube-proxy to stop")


def realnode_up(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REALNODE_SH), "up"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )


def test_cluster_up_on_a_running_cluster_restarts_nothing(
    cluster: Cluster, images: dict[str, str]
) -> None:
    if not cluster.local:
        pytest.skip("the local cluster's own script")
    before = pids()
    assert set(before) == set(DAEMONS), before
    seen = (RN / "kube-proxy.log").stat().st_size
    done = subprocess.run([str(CLUSTER_SH), "up"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert pids() == before
    with open(RN / "kube-proxy.log") as log:
        log.seek(seen)
        assert PROXY_RESTART not in log.read()


def test_no_wait_counts_a_build_and_a_failed_up_stops_what_it_started(
    cluster: Cluster, images: dict[str, str], tmp_path: Path
) -> None:
    """With a build slower than the node's wait (DDP_TEST_SLOW_BUILD > DDP_NODE_WAIT), up still
    succeeds: each wait starts after the builds. The kube-proxy it starts holds no file of its
    caller (a lock, as `flock LOCK make demo` would pass). With no time to wait, up fails and
    stops the kube-proxy it started, and nothing else."""
    stop_kube_proxy()
    try:
        with open(tmp_path / "caller.lock", "w") as lock:
            done = subprocess.run(
                [str(REALNODE_SH), "up"],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "DDP_TEST_SLOW_BUILD": "12", "DDP_NODE_WAIT": "8"},
                pass_fds=(lock.fileno(),),
            )
        assert done.returncode == 0, done.stderr[-3000:]
        for name, pid in pids().items():
            held = {os.path.realpath(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
            assert str(tmp_path / "caller.lock") not in held, name
            assert str(ROOT / ".cluster" / "realnode.lock") not in held, name

        stop_kube_proxy()
        others = {k: v for k, v in pids().items() if k != "kube-proxy"}
        failed = realnode_up(DDP_NODE_WAIT="0")
        assert failed.returncode != 0
        assert "kube-proxy is not healthy in 0s" in failed.stderr, failed.stderr[-3000:]
        assert "stopping what it started (kube-proxy)" in failed.stderr, failed.stderr[-3000:]
        assert pids() == others
    finally:
        again = realnode_up()
        assert again.returncode == 0, again.stderr[-3000:]
    assert set(pids()) == set(DAEMONS)


# What up renders from realnode/'s templates (render), each through a file of its own beside it.
RENDERED = (
    "containerd/config.toml",
    "containerd/certs.d/_default/hosts.toml",
    "cni/net.d/10-ddp.conflist",
    "kubelet/config.yaml",
    "kube-proxy.yaml",
    "coredns/Corefile",
)


def test_ups_at_once_take_turns_restart_nothing_and_leave_no_render_behind(
    cluster: Cluster, images: dict[str, str]
) -> None:
    """Three `realnode.sh up` at once, as two test sessions and a user's `make cluster-up` run
    them (CI of 2026-12-05 failed so: "mv: cannot stat kube-proxy.yaml.new"): each succeeds, no
    daemon restarts, and no rendered file's temporary copy is left."""
    before = pids()
    ups = [
        subprocess.Popen(
            [str(REALNODE_SH), "up"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    for up in ups:
        _, err = up.communicate(timeout=600)
        assert up.returncode == 0, err[-3000:]
    assert pids() == before
    for rendered in RENDERED:
        path = RN / rendered
        assert path.is_file(), path
        assert sorted(path.parent.glob(f"{path.name}.*")) == []


TAINT = {"key": "ddp-operator.io/test-up", "value": "held", "effect": "NoSchedule"}


def ready(cluster: Cluster, name: str) -> bool:
    return (nodes.ready_condition(nodes.get_node(cluster, name)) or {}).get("status") == "True"


def test_cluster_up_on_a_running_cluster_awaits_only_the_fake_nodes_it_creates(
    cluster: Cluster, images: dict[str, str]
) -> None:
    """Other nodes come and go and may never be Ready (a benchmark's, a test's pool: CI of
    2026-11-29 saw `make demo` fail when a wait for every node read one that was gone): up awaits
    none of them. A fake node a test has tainted keeps its taint (up creates, never re-applies);
    a fake node deleted is created again, and Ready when up returns."""
    if not cluster.local:
        pytest.skip("the local cluster's own script")
    other, tainted, deleted = f"up-other-{uuid.uuid4().hex[:6]}", "cpu-node-1", "ascend-node-1"
    cluster.core.create_node({"metadata": {"name": other}})  # no kubelet, not kwok's: never Ready
    held = [*(nodes.get_node(cluster, tainted)["spec"].get("taints") or []), TAINT]
    cluster.core.patch_node(tainted, {"spec": {"taints": held}})
    cluster.core.delete_node(deleted)
    wait_for(
        lambda: not cluster.core.list_node(field_selector=f"metadata.name={deleted}").items,
        timeout=30,
        what=f"node {deleted} to go",
    )
    try:
        done = subprocess.run([str(CLUSTER_SH), "up"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert not ready(cluster, other)
        assert TAINT in nodes.get_node(cluster, tainted)["spec"]["taints"]
        assert ready(cluster, deleted)
    finally:
        cluster.core.delete_node(other)
        cluster.core.patch_node(tainted, {"spec": {"taints": held[:-1]}})
