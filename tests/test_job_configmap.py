"""The job's ConfigMap (``job_configmap``) and the pods that read it: nothing in a pod grows
with the number of workers; its name is suffixed, and pods of the legacy name keep it in use.
That the kubelet resolves it: tests/test_realnode_jobs.py (platform-script reads
VC_WORKER_HOSTS in real pods); through the API: test_job_configmap_api.py (the legacy one kept
in step, then dropped: there too)."""

from __future__ import annotations

import dataclasses
import json

from ddp_operator.manifests import builders, job_configmap
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import observe

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
    assert cm["metadata"]["name"] == "j" and cm["metadata"]["namespace"] == "ns"  # meta's name
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
            "valueFrom": {"configMapKeyRef": {"name": "j-ddp-env", "key": key}},
        }


def test_its_name_is_suffixed_and_fits_a_dns_label_for_the_longest_job_name() -> None:
    assert job_configmap.name("j") == "j-ddp-env"
    longest = "a" * 54  # the CRD: name + len("-worker-") + digits of nodes - 1 <= 63
    assert len(job_configmap.name(longest)) <= 63
    assert job_configmap.legacy_name("j") == "j"


def legacy_pod(j, index: int) -> dict:
    """A worker pod as operators built it before the suffix: it reads ConfigMap ``<job>``."""
    pod = builders.build_worker_pod(j, index, in_place=True)
    text = json.dumps(pod).replace('"name": "j-ddp-env"', '"name": "j"')
    pod = json.loads(text)
    pod["metadata"]["uid"] = f"uid-{index}"
    return pod


def test_a_pod_that_reads_the_legacy_configmap_keeps_it_in_use() -> None:
    j = job(nodes=2)
    new, old = observe(builders.build_worker_pod(j, 0)), observe(legacy_pod(j, 1))
    assert new is not None and new.env_configmap == "j-ddp-env"
    assert old is not None and old.env_configmap == "j"
    assert job_configmap.legacy_in_use("j", [new, old])
    assert not job_configmap.legacy_in_use("j", [new])
    assert not job_configmap.legacy_in_use("j", [dataclasses.replace(old, deleting=True)])
    assert not job_configmap.legacy_in_use("other", [old])


def test_a_user_configmap_in_the_trainers_env_is_not_the_jobs() -> None:
    j = job(nodes=2)
    pod = builders.build_worker_pod(j, 0)
    trainer = pod["spec"]["containers"][0]
    trainer["env"].insert(0, job_configmap.key_env("SETTINGS", "j", "settings"))
    seen = observe(pod)
    assert seen is not None and seen.env_configmap == "j-ddp-env"


def test_lookup_resolves_only_the_jobs_configmap() -> None:
    data = {"VC_WORKER_HOSTS.2": "a,b"}
    assert job_configmap.lookup(job_configmap.hosts_env("j", 2), "j", data) == "a,b"
    assert job_configmap.lookup(job_configmap.hosts_env("other", 2), "j", data) is None
    assert job_configmap.lookup({"name": "X", "value": "1"}, "j", data) is None
