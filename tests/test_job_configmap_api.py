"""The job's ConfigMap (``job_configmap``, created by ``claims.give_env``), through the API
(any cluster): there before the first pod, the job's (its controller), holding the host list and
the attempt, for jobs of both restart strategies; a foreign one of the job's name reported
(NameConflict), never adopted or changed. That restarted containers read it:
tests/test_realnode_inplace.py (a script that fails only while DDP_ATTEMPT is 0) and
tests/test_realnode_jobs.py (a platform script reading VC_WORKER_HOSTS)."""

from __future__ import annotations

from datetime import datetime

import pytest
from kubernetes.client import ApiException, V1ConfigMap
from test_ownership import blocked

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


def _configmap(cluster: Cluster, ns: str, name: str) -> V1ConfigMap | None:
    try:
        return cluster.core.read_namespaced_config_map(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_an_in_place_job_gets_its_configmap_before_its_first_pod(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("att", namespace, nodes=2, restartStrategy="InPlace"))
    running = wait_running(cluster, namespace, "att", 2)
    cm = _configmap(cluster, namespace, "att")
    hosts = "att-worker-0.att,att-worker-1.att"
    assert cm is not None and cm.data == {"DDP_ATTEMPT": "0", "VC_WORKER_HOSTS.2": hosts}
    (ref,) = cm.metadata.owner_references
    assert ref.controller and ref.uid == jobs.get(cluster, namespace, "att")["metadata"]["uid"]
    first = min(datetime.fromisoformat(p["metadata"]["creationTimestamp"]) for p in running)
    assert cm.metadata.creation_timestamp <= first


def test_a_job_that_restarts_by_recreate_gets_one_and_its_pods_carry_their_attempt(
    cluster: Cluster, namespace: str
) -> None:
    jobs.apply(cluster, ddpjob("rec", namespace, nodes=2, restartStrategy="Recreate"))
    running = wait_running(cluster, namespace, "rec", 2)
    cm = _configmap(cluster, namespace, "rec")
    assert cm is not None and cm.data["VC_WORKER_HOSTS.2"] == "rec-worker-0.rec,rec-worker-1.rec"
    for pod in running:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["DDP_ATTEMPT"] == {"name": "DDP_ATTEMPT", "value": "0"}
        ref = {"name": "rec", "key": "VC_WORKER_HOSTS.2"}
        assert env["VC_WORKER_HOSTS"]["valueFrom"] == {"configMapKeyRef": ref}


def test_a_foreign_configmap_is_reported_and_never_adopted(
    cluster: Cluster, namespace: str
) -> None:
    foreign = cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "cmx"}, "data": {"DDP_ATTEMPT": "7", "other": "x"}}
    )
    jobs.apply(cluster, ddpjob("cmx", namespace, nodes=2, restartStrategy="InPlace"))
    cond = blocked(cluster, namespace, "cmx", "NameConflict")
    assert "ConfigMap cmx" in cond["message"] and "no controller" in cond["message"]
    assert workers(cluster, namespace, "cmx") == []  # no pod without its attempt
    still = _configmap(cluster, namespace, "cmx")
    assert still is not None and still.metadata.uid == foreign.metadata.uid
    assert still.data == {"DDP_ATTEMPT": "7", "other": "x"} and not still.metadata.owner_references
    cluster.core.delete_namespaced_config_map("cmx", namespace)
    wait_running(cluster, namespace, "cmx", 2)
    jobs.wait_condition(cluster, namespace, "cmx", "Blocked", status="False")
    mine = wait_for(lambda: _configmap(cluster, namespace, "cmx"), what="the job's own ConfigMap")
    assert mine.metadata.owner_references[0].kind == "DDPJob"
    assert mine.data == {
        "DDP_ATTEMPT": "0",
        "VC_WORKER_HOSTS.2": "cmx-worker-0.cmx,cmx-worker-1.cmx",
    }
