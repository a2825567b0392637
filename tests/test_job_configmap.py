"""The job's ConfigMap (``job_configmap``) and the pods that read it: nothing in a pod grows
with the number of workers. That the kubelet resolves it: tests/test_realnode_jobs.py
(platform-script reads VC_WORKER_HOSTS in real pods); through the API: test_job_configmap_api.py."""

from __future__ import annotations

import json

from ddp_operator.manifests import builders, job_configmap
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def job(**spec):
    body = ddpjob("j", "ns", **spec)
    body["metadata"]["uid"] = "uid-1"
    return resolve(body)


def test_the_configmap_holds_the_host_list_of_the_groups_size_and_the_attempt() -> None:
    j = job(nodes=3)
    cm = job_configmap.build(builders.job_object_meta(j), 3, builders.worker_hosts(j), 2)
    assert cm["kind"] == "ConfigMap" and cm["data"] == {
        "DDP_ATTEMPT": "2",
        "VC_WORKER_HOSTS.3": "j-worker-0.j,j-worker-1.j,j-worker-2.j",
    }
    assert cm["metadata"]["name"] == "j" and cm["metadata"]["namespace"] == "ns"
    (owner,) = cm["metadata"]["ownerReferences"]
    assert owner["kind"] == "DDPJob" and owner["uid"] == "uid-1" and owner["controller"] is True


def test_a_worker_pod_weighs_the_same_in_a_group_of_1024_and_of_4096() -> None:
    sizes = {n: len(json.dumps(builders.build_worker_pod(job(nodes=n), 1))) for n in (1024, 4096)}
    # The numbers of the group's size (NNODES, WORLD_SIZE, the hosts key...) have as many digits.
    assert sizes[1024] == sizes[4096] < 2500, sizes


def test_a_pod_reads_the_host_list_of_the_size_it_was_created_for() -> None:
    j2, j3 = job(nodes=2, minNodes=2, maxNodes=3), job(nodes=3, minNodes=2, maxNodes=3)
    for j, key in ((j2, "VC_WORKER_HOSTS.2"), (j3, "VC_WORKER_HOSTS.3")):
        trainer = builders.build_worker_pod(j, 1)["spec"]["containers"][0]
        (hosts,) = [e for e in trainer["env"] if e["name"] == "VC_WORKER_HOSTS"]
        assert hosts == {
            "name": "VC_WORKER_HOSTS",
            "valueFrom": {"configMapKeyRef": {"name": "j", "key": key}},
        }


def test_lookup_resolves_only_the_jobs_configmap() -> None:
    data = {"VC_WORKER_HOSTS.2": "a,b"}
    assert job_configmap.lookup(job_configmap.hosts_env("j", 2), "j", data) == "a,b"
    assert job_configmap.lookup(job_configmap.hosts_env("other", 2), "j", data) is None
    assert job_configmap.lookup({"name": "X", "value": "1"}, "j", data) is None
