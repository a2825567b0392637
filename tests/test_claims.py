"""A job's objects created on the real API server (``claims``), with no operator running: the
Service, then the pods; a template refused for good leaves nothing of the job behind, and a
foreign Service of the job's name stops it before any pod."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ddp_operator.act import claims
from ddp_operator.api.kube import Kube
from ddp_operator.decide.failures import NameConflict, StepFailed, classify
from ddp_operator.manifests import builders, job_configmap
from ddp_operator.model.jobspec import JobSpec, resolve

from harness import jobs
from harness.cluster import Cluster
from harness.jobs import workers
from jobs import ddpjob

pytestmark = [pytest.mark.cluster]


def job(cluster: Cluster, ns: str, name: str, **template: Any) -> JobSpec:
    """A DDPJob of 3 workers, applied (garbage collection keeps only pods whose owner exists)
    and resolved."""
    body = ddpjob(name, ns, nodes=3)
    body["spec"]["template"]["spec"].update(template)
    api = (jobs.GROUP, jobs.VERSION, ns, jobs.PLURAL)
    return resolve(cluster.custom.create_namespaced_custom_object(*api, body))


def create(cluster: Cluster, spec: JobSpec, fresh: bool = True) -> tuple[list[bool], bool]:
    def build(i: int) -> dict[str, Any]:
        return builders.build_worker_pod(spec, i, 0)

    return asyncio.run(
        claims.create_group(Kube(cluster.api), spec, build, range(spec.nodes), fresh)
    )


def services(cluster: Cluster, ns: str, name: str) -> list[Any]:
    return [s for s in cluster.core.list_namespaced_service(ns).items if s.metadata.name == name]


def test_a_fresh_group_gets_its_service_and_every_pod(cluster: Cluster, quiet: str) -> None:
    spec = job(cluster, quiet, "fine")
    assert create(cluster, spec) == ([True, True, True], True)
    names = sorted(w["metadata"]["name"] for w in workers(cluster, quiet, "fine"))
    assert names == [f"fine-worker-{i}" for i in range(3)]
    (svc,) = services(cluster, quiet, "fine")
    assert svc.metadata.owner_references[0].uid == spec.uid
    # Asked again (the watch lagged): nothing is created twice, and all of it is the job's.
    assert create(cluster, spec) == ([False, False, False], True)


def test_a_refused_template_leaves_nothing_behind(cluster: Cluster, quiet: str) -> None:
    spec = job(cluster, quiet, "bad", containers=[{"name": "trainer", "command": ["python"]}])
    with pytest.raises(StepFailed) as raised:
        create(cluster, spec)
    failure = classify(raised.value)
    assert failure.permanent and failure.reason == "InvalidPodTemplate", failure
    assert "checking pod bad-worker-0 (dry run)" in failure.message
    assert "spec.containers[0].image: Required value" in failure.message
    assert workers(cluster, quiet, "bad") == []
    assert services(cluster, quiet, "bad") == []


def test_a_foreign_service_stops_the_group_before_any_pod(cluster: Cluster, quiet: str) -> None:
    cluster.core.create_namespaced_service(
        quiet, {"metadata": {"name": "taken"}, "spec": {"ports": [{"port": 80}]}}
    )
    with pytest.raises(NameConflict, match="Service taken"):
        create(cluster, job(cluster, quiet, "taken"))
    assert workers(cluster, quiet, "taken") == []
    assert not services(cluster, quiet, "taken")[0].metadata.owner_references


def test_a_foreign_pod_of_a_workers_name_is_named_and_left_alone(
    cluster: Cluster, quiet: str
) -> None:
    stranger = cluster.core.create_namespaced_pod(
        quiet,
        {
            "metadata": {"name": "fp-worker-1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    with pytest.raises(NameConflict, match="fp-worker-1"):
        create(cluster, job(cluster, quiet, "fp"))
    still = cluster.core.read_namespaced_pod("fp-worker-1", quiet)
    assert still.metadata.uid == stranger.metadata.uid and not still.metadata.deletion_timestamp


def test_the_attempt_in_the_job_s_configmap_is_set_on_what_was_read_and_never_moved_back(
    cluster: Cluster, quiet: str
) -> None:
    """Issue 53: DDP_ATTEMPT was patched with no precondition, so a replica behind the job
    could move it back. Now: given on the version read (a change in between is read again),
    with where to resume, and a later attempt than the one given is refused, saying so."""
    spec = job(cluster, quiet, "given")
    kube, name = Kube(cluster.api), f"given{job_configmap.SUFFIX}"
    resume = {"DDP_RESUME_STEP": "40", "DDP_RESUME_PATH": "/ckpt/40"}
    assert asyncio.run(claims.give_env(kube, spec, 2, resume=resume))
    data = cluster.core.read_namespaced_config_map(name, quiet).data
    assert data["DDP_ATTEMPT"] == "2" and data["DDP_RESUME_STEP"] == "40", data
    assert asyncio.run(claims.give_env(kube, spec, 3))  # moves on, the resume point kept
    assert cluster.core.read_namespaced_config_map(name, quiet).data["DDP_ATTEMPT"] == "3"
    with pytest.raises(StepFailed) as behind:
        asyncio.run(claims.give_env(kube, spec, 1))
    assert "it says attempt 3, later: this replica is behind the job" in str(behind.value)
    assert classify(behind.value).reason == "OperatorError"  # transient: on the job, retried
    assert cluster.core.read_namespaced_config_map(name, quiet).data["DDP_ATTEMPT"] == "3"
    # A write on a version read before another's change is refused by the API server.
    read = asyncio.run(kube.read_configmap(quiet, name))
    assert read is not None
    uid, version = read["metadata"]["uid"], read["metadata"]["resourceVersion"]
    cluster.core.patch_namespaced_config_map(name, quiet, {"data": {"other": "x"}})
    stale = kube.patch_configmap(quiet, name, uid, {"DDP_ATTEMPT": "9"}, version)
    assert asyncio.run(stale) is False
    assert cluster.core.read_namespaced_config_map(name, quiet).data["DDP_ATTEMPT"] == "3"
