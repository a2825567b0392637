"""The job's ConfigMap ``<job>-ddp-env`` (``job_configmap``, created by ``claims.give_env``),
through the API (any cluster): there before the first pod, the job's (its controller), holding
the host list and the attempt, for jobs of both restart strategies; a foreign one of its name
reported (NameConflict), never adopted or changed; a user's ConfigMap named after the job left
alone; and a job made when the ConfigMap was named after it (pods reading ``<job>``) taken over
by this operator: both kept in step, the old one deleted once no pod reads it. That restarted
containers read it: tests/test_realnode_inplace.py (a script that fails only while DDP_ATTEMPT
is 0) and tests/test_realnode_jobs.py (a platform script reading VC_WORKER_HOSTS)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kubernetes.client import ApiException, V1ConfigMap
from test_ownership import blocked

from ddp_operator.manifests import builders, job_configmap, worker_env
from ddp_operator.model.jobspec import resolve

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running, workers
from harness.operator import OperatorProcess
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
    cm = _configmap(cluster, namespace, "att-ddp-env")
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
    cm = _configmap(cluster, namespace, "rec-ddp-env")
    assert cm is not None and cm.data["VC_WORKER_HOSTS.2"] == "rec-worker-0.rec,rec-worker-1.rec"
    for pod in running:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["DDP_ATTEMPT"] == {"name": "DDP_ATTEMPT", "value": "0"}
        ref = {"name": "rec-ddp-env", "key": "VC_WORKER_HOSTS.2"}
        assert env["VC_WORKER_HOSTS"]["valueFrom"] == {"configMapKeyRef": ref}


def test_a_foreign_configmap_is_reported_and_never_adopted(
    cluster: Cluster, namespace: str
) -> None:
    foreign = cluster.core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "cmx-ddp-env"}, "data": {"DDP_ATTEMPT": "7", "other": "x"}},
    )
    jobs.apply(cluster, ddpjob("cmx", namespace, nodes=2, restartStrategy="InPlace"))
    cond = blocked(cluster, namespace, "cmx", "NameConflict")
    assert "ConfigMap cmx-ddp-env" in cond["message"] and "no controller" in cond["message"]
    assert workers(cluster, namespace, "cmx") == []  # no pod without its attempt
    still = _configmap(cluster, namespace, "cmx-ddp-env")
    assert still is not None and still.metadata.uid == foreign.metadata.uid
    assert still.data == {"DDP_ATTEMPT": "7", "other": "x"} and not still.metadata.owner_references
    cluster.core.delete_namespaced_config_map("cmx-ddp-env", namespace)
    wait_running(cluster, namespace, "cmx", 2)
    jobs.wait_condition(cluster, namespace, "cmx", "Blocked", status="False")
    mine = wait_for(
        lambda: _configmap(cluster, namespace, "cmx-ddp-env"), what="the job's own ConfigMap"
    )
    assert mine.metadata.owner_references[0].kind == "DDPJob"
    assert mine.data == {
        "DDP_ATTEMPT": "0",
        "VC_WORKER_HOSTS.2": "cmx-worker-0.cmx,cmx-worker-1.cmx",
    }


def test_a_foreign_configmap_of_common_values_is_a_name_conflict(
    cluster: Cluster, namespace: str
) -> None:
    manifest = ddpjob("cmc", namespace, nodes=2)
    name = worker_env.name(resolve(manifest))  # named after its content: known before
    cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": name}, "data": {"MASTER_ADDR": "elsewhere"}}
    )
    jobs.apply(cluster, manifest)
    cond = blocked(cluster, namespace, "cmc", "NameConflict")
    assert f"ConfigMap {name}" in cond["message"], cond
    assert workers(cluster, namespace, "cmc") == []  # no pod would read another's values
    still = _configmap(cluster, namespace, name)
    assert still.data == {"MASTER_ADDR": "elsewhere"} and not still.metadata.owner_references
    cluster.core.delete_namespaced_config_map(name, namespace)
    wait_running(cluster, namespace, "cmc", 2)
    mine = _configmap(cluster, namespace, name)
    assert mine.metadata.owner_references[0].kind == "DDPJob"
    assert mine.data["MASTER_ADDR"] == "cmc-worker-0.cmc" and mine.immutable


def test_a_users_configmap_named_after_the_job_is_left_alone(
    cluster: Cluster, namespace: str
) -> None:
    """The Kubeflow habit: the job's scripts in a ConfigMap of its name, mounted by its pods."""
    scripts = {"train.sh": "python train.py"}
    users = cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "habit"}, "data": scripts}
    )
    body = ddpjob("habit", namespace, nodes=2)
    pod_spec = body["spec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "scripts", "configMap": {"name": "habit"}}]
    pod_spec["containers"][0]["volumeMounts"] = [{"name": "scripts", "mountPath": "/scripts"}]
    jobs.apply(cluster, body)
    wait_running(cluster, namespace, "habit", 2)
    job = jobs.wait_phase(cluster, namespace, "habit", "Running")
    assert (jobs.condition(job, "Blocked") or {}).get("status") != "True", job["status"]
    still = _configmap(cluster, namespace, "habit")
    assert still is not None and still.metadata.uid == users.metadata.uid
    assert still.data == scripts and not still.metadata.owner_references
    mine = _configmap(cluster, namespace, "habit-ddp-env")
    assert mine is not None and mine.metadata.owner_references[0].uid == job["metadata"]["uid"]


def _as_built_before(pod: dict) -> dict:
    """A worker pod as operators built it when the ConfigMap was named after the job."""
    name = pod["metadata"]["labels"]["ddp-operator.io/job-name"]
    old = json.dumps({"name": job_configmap.name(name)})
    return json.loads(json.dumps(pod).replace(old[1:-1], json.dumps({"name": name})[1:-1]))


def _refs(pod: dict) -> set[str]:
    """The ConfigMaps a pod's containers take env from."""
    return {
        e["valueFrom"]["configMapKeyRef"]["name"]
        for ct in pod["spec"]["containers"]
        for e in ct.get("env") or ()
        if "configMapKeyRef" in (e.get("valueFrom") or {})
    }


def _trainer_failed_in_place(cluster: Cluster, ns: str, pod: str) -> None:
    """What a kubelet reports of an in-place pod whose trainer exited 1, its watch running."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ended = {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}
    statuses = [
        {"name": "trainer", "image": "t", "imageID": "", "ready": False, "restartCount": 0,
         "started": False, "state": {"terminated": ended}},
        {"name": "ddp-attempt-watch", "image": "t", "imageID": "", "ready": True,
         "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}},
    ]  # fmt: skip
    cluster.core.patch_namespaced_pod_status(
        pod, ns, {"status": {"phase": "Running", "containerStatuses": statuses}}
    )


def test_a_job_made_when_the_configmap_had_the_jobs_name_is_carried_over(
    cluster: Cluster, quiet: str
) -> None:
    """Its pods read ``<job>``: every attempt goes to both ConfigMaps while one does (an in-place
    restart reads the right one); once its group is recreated, reading ``<job>-ddp-env``,
    ``<job>`` is deleted."""
    api = (jobs.GROUP, jobs.VERSION, quiet, jobs.PLURAL)
    body = ddpjob("old", quiet, nodes=2, restartStrategy="InPlace", backoffLimit=3)
    job = resolve(cluster.custom.create_namespaced_custom_object(*api, body))
    # What the earlier operator made: the ConfigMap of the job's name, then pods reading it.
    meta = builders.job_object_meta(job, "old")
    data = job_configmap.data(2, builders.worker_hosts(job), 0)
    cluster.core.create_namespaced_config_map(quiet, {"metadata": meta, "data": data})
    for i in range(2):
        pod = _as_built_before(builders.build_worker_pod(job, i, 0, in_place=True))
        assert _refs(pod) == {"old"}
        cluster.core.create_namespaced_pod(quiet, pod)
    wait_running(cluster, quiet, "old", 2)
    op = OperatorProcess(cluster, quiet).start()
    try:
        op.wait_ready()
        jobs.wait_phase(cluster, quiet, "old", "Running")
        assert _configmap(cluster, quiet, "old").data["DDP_ATTEMPT"] == "0"

        _trainer_failed_in_place(cluster, quiet, "old-worker-1")
        told = wait_for(
            lambda: (
                (
                    (
                        p := cluster.core.read_namespaced_pod("old-worker-0", quiet)
                    ).metadata.annotations
                    or {}
                ).get("ddp-operator.io/attempt")
                == "1"
                and p
            ),
            what="worker 0 given attempt 1 in place",
        )
        assert told.metadata.uid  # the same pod, told: not recreated
        for name in ("old", "old-ddp-env"):  # both say it, before the pod was told
            cm = _configmap(cluster, quiet, name)
            assert cm is not None and cm.data["DDP_ATTEMPT"] == "1", name
            assert cm.metadata.owner_references[0].uid == job.uid

        # Worker 0 ends whole: the group is recreated, its pods reading <job>-ddp-env only.
        pods.finish(cluster, quiet, "old-worker-0", 1)
        wait_for(
            lambda: [w for w in workers(cluster, quiet, "old") if w["metadata"]["labels"]
                     ["ddp-operator.io/created-in-attempt"] != "0"] or None,
            what="the recreated group",
        )  # fmt: skip
        new = [
            w
            for w in workers(cluster, quiet, "old")
            if not w["metadata"].get("deletionTimestamp")
            and w["metadata"]["labels"]["ddp-operator.io/created-in-attempt"] != "0"
        ]
        assert new and all(_refs(w) == {"old-ddp-env"} for w in new)
        wait_for(lambda: _configmap(cluster, quiet, "old") is None, what="<job> deleted")
        mine = _configmap(cluster, quiet, "old-ddp-env")
        assert mine is not None and mine.metadata.owner_references[0].uid == job.uid
    finally:
        op.stop()


def test_pods_labelled_with_their_attempt_as_builds_up_to_0_2_0_did_are_carried_over(
    cluster: Cluster, quiet: str
) -> None:
    """Builds up to 0.2.0 labelled a pod's attempt ``ddp-operator.io/attempt``, the key of the
    in-place annotation (the attempt a pod runs); the label is now ``created-in-attempt``. A
    group of the old label in attempt 1 is the job's current one (read as attempt 0, it would be
    taken for an earlier attempt's and recreated); its next group carries the new label only."""
    api = (jobs.GROUP, jobs.VERSION, quiet, jobs.PLURAL)
    body = ddpjob("lab", quiet, nodes=2, restartStrategy="Recreate", backoffLimit=3)
    job = resolve(cluster.custom.create_namespaced_custom_object(*api, body))
    cluster.custom.patch_namespaced_custom_object_status(*api, "lab", {"status": {"restarts": 1}})
    uids = []
    for i in range(2):
        pod = builders.build_worker_pod(job, i, 1)
        labels = pod["metadata"]["labels"]
        labels["ddp-operator.io/attempt"] = labels.pop("ddp-operator.io/created-in-attempt")
        uids.append(cluster.core.create_namespaced_pod(quiet, pod).metadata.uid)
    wait_running(cluster, quiet, "lab", 2, attempt=1)  # the harness reads either label
    op = OperatorProcess(cluster, quiet).start()
    try:
        op.wait_ready()
        found = jobs.wait_phase(cluster, quiet, "lab", "Running")
        assert found["status"]["restarts"] == 1, found["status"]
        kept = workers(cluster, quiet, "lab")
        assert [w["metadata"]["uid"] for w in kept] == uids, "the old group was recreated"
        assert not any(w["metadata"].get("deletionTimestamp") for w in kept)

        pods.finish(cluster, quiet, "lab-worker-1", 1)  # the group is recreated: attempt 2
        new = wait_running(cluster, quiet, "lab", 2, attempt=2)
        for w in new:
            labels = w["metadata"]["labels"]
            assert labels["ddp-operator.io/created-in-attempt"] == "2", labels
            assert "ddp-operator.io/attempt" not in labels, labels
        assert jobs.get(cluster, quiet, "lab")["status"]["restarts"] == 2
    finally:
        op.stop()
