"""An isolated job's NetworkPolicy deleted while it trains, on the real node (its NetworkPolicy
engine): back within seconds, the job's Events say so, and a pod of another namespace cannot
connect to worker 0's master port once it is back (it could while the policy was missing); its
ConfigMap deleted before an in-place restart: every process still gets its attempt."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from test_realnode_inplace import ATTEMPT, SCRIPT, _pods
from test_realnode_netpol import _finish, _job, _master_ip, _probe, elsewhere  # noqa: F401

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.realnode import kubectl_ddp, shell_job

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(600)]


def test_a_deleted_network_policy_is_back_within_seconds_and_isolates_again(
    cluster: Cluster,
    namespace: str,
    elsewhere: str,  # noqa: F811
    operator,
    images: dict[str, str],
) -> None:
    py, trainer = images["python"], images["trainer"]
    jobs.apply(cluster, _job("iso", namespace, trainer, network={"isolation": True}))
    ip = _master_ip(cluster, namespace, "iso")
    net = client.NetworkingV1Api(cluster.api)
    name = "iso-ddp-isolation"
    old = net.read_namespaced_network_policy(name, namespace)
    assert _probe(cluster, elsewhere, "stranger-0", py, ip).startswith("BLOCKED")
    net.delete_namespaced_network_policy(name, namespace)
    started = time.monotonic()

    def back() -> bool:
        found = net.list_namespaced_network_policy(
            namespace, field_selector=f"metadata.name={name}"
        )
        return bool(found.items) and found.items[0].metadata.uid != old.metadata.uid

    wait_for(back, timeout=10, interval=0.2, what="the NetworkPolicy created again")
    took = time.monotonic() - started
    assert took < 5, took
    events = jobs.wait_event(cluster, namespace, "iso", "NetworkPolicyRestored")
    assert events and events[-1]["type"] == "Warning", events
    restored = jobs.wait_event(cluster, namespace, "iso", "ObjectsRestored")
    assert any(f"NetworkPolicy {name} missing" in e["message"] for e in restored), restored
    time.sleep(2)  # the engine takes the policy in
    assert _probe(cluster, elsewhere, "stranger-1", py, ip).startswith("BLOCKED")
    _finish(cluster, namespace, "iso")
    done = jobs.wait_phase(cluster, namespace, "iso", "Succeeded", timeout=120)
    assert done["status"]["restarts"] == 0, done["status"]


CRASH_WHEN_TOLD = "while [ ! -e /tmp/crash ]; do sleep 0.2; done; echo crash"


def test_an_in_place_restart_after_the_configmap_was_deleted_gives_every_process_its_attempt(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """The job's ConfigMap (where an in-place pod's containers take DDP_ATTEMPT from as they
    start) deleted while the group runs: back at once, and the in-place restart that follows
    gives attempt 1 to every process. Worker 1 fails only once told, after the ConfigMap is
    back: a restart writes that ConfigMap itself (creating it if it went), and one that began
    first would have put it back with no ObjectsRestored (run 41: its planned failure, 3 s after
    it started, came before the deletion, the cores busy)."""
    told = SCRIPT.replace("sleep 3; echo crash", CRASH_WHEN_TOLD)
    assert told != SCRIPT
    job = shell_job(
        "cm",
        namespace,
        images["trainer"],
        told,
        procsPerNode=2,
        backoffLimit=2,
        restartStrategy="InPlace",
    )
    jobs.apply(cluster, job)
    wait_for(
        lambda: (
            len(ps := _pods(cluster, namespace, "cm")) == 2
            and all(p["status"].get("podIP") for p in ps)
        ),
        timeout=120,
        what="both workers with their IPs",
    )
    cluster.core.delete_namespaced_config_map("cm-ddp-env", namespace)
    restored = jobs.wait_event(cluster, namespace, "cm", "ObjectsRestored")
    assert any("ConfigMap cm-ddp-env" in e["message"] for e in restored), restored
    tell = (
        "exec",
        "-n",
        namespace,
        "cm-worker-1",
        "-c",
        "trainer",
        "--",
        "sh",
        "-c",
        ": >/tmp/crash",
    )
    wait_for(lambda: cluster.kubectl(*tell, check=False).returncode == 0, what="worker 1 told")
    done = jobs.wait_phase(cluster, namespace, "cm", "Succeeded", timeout=300)
    assert done["status"]["restarts"] == 1, done["status"]
    logs = kubectl_ddp(cluster, "logs", "cm", "-n", namespace)
    seen = ATTEMPT.findall(logs)
    assert sorted(int(rank) for rank, _ in seen) == [0, 1, 2, 3], logs
    assert {attempt for _, attempt in seen} == {"1"}, logs
