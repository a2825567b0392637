"""The env of a worker's trainer (``worker_env``): where each value of the contract lives, and
that the kubelet's resolution of a pod gives every process what the contract says."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ddp_operator.manifests import builders, job_configmap, worker_env
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import JobSpec, resolve
from ddp_operator.model.workers import observe

from jobs import ddpjob, env_of

SHAPES = {
    "fixed": {"nodes": 3},
    "procs": {"nodes": 2, "procsPerNode": 4},
    "elastic": {"nodes": 3, "minNodes": 2, "maxNodes": 5, "rdzvConf": {"join_timeout": "60"}},
    "nccl": {"nodes": 2, "backend": "nccl", "accelerator": {"resource": "nvidia.com/gpu"}},
    "ascend": {
        "nodes": 2,
        "accelerator": {
            "resource": "huawei.com/Ascend910",
            "perNode": 8,
            "hcclConnectTimeout": 900,
        },
    },
}


def job(**spec) -> JobSpec:
    body = ddpjob("train", "ml", **spec)
    body["metadata"]["uid"] = "uid-1"
    return resolve(body)


def full_contract(j: JobSpec, index: int, attempt: int) -> dict[str, str]:
    """What every process of worker ``index`` is promised (the README's table)."""
    return {
        **dict(worker_env.contract(j, index, attempt)),
        **dict(worker_env.defaults(j)),
        c.ENV_HOSTS: builders.worker_hosts(j),
    }


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("in_place", [False, True], ids=["recreate", "in-place"])
def test_every_worker_resolves_to_the_whole_contract(shape: str, in_place: bool) -> None:
    j = job(**SHAPES[shape])
    for i in range(j.nodes):
        for attempt in (0, 2):
            pod = builders.build_worker_pod(j, i, attempt, in_place)
            env = env_of(pod, j)
            want = full_contract(j, i, attempt)
            assert {k: env.get(k) for k in want} == want, (shape, i, attempt)


def test_a_pod_carries_its_own_values_and_the_common_ones_come_from_one_configmap() -> None:
    j = job(nodes=4)
    trainer = builders.build_worker_pod(j, 1)["spec"]["containers"][0]
    inline = [e["name"] for e in trainer["env"]]
    assert inline[:6] == [
        "NODE_RANK",
        "RANK",
        "PET_NODE_RANK",
        c.ENV_ATTEMPT,
        "VC_TASK_INDEX",
        c.ENV_HOSTS,
    ]
    # Defaults last, each hidden by a template entry as before: a gloo job's flight recorder
    # (its buffer, where its dumps go).
    assert inline[-3:] == ["PYTHONUNBUFFERED", "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"]
    (ours,) = trainer["envFrom"]
    assert ours == {"configMapRef": {"name": worker_env.name(j)}}
    assert worker_env.name(j).startswith("train-ddp-common-")
    data = worker_env.data(j)
    assert data["MASTER_ADDR"] == "train-worker-0.train" and data["WORLD_SIZE"] == "4"
    assert not set(data) & set(inline)
    # Every key of it becomes a variable of every worker: only names of the contract.
    assert set(data) <= set(c.RESERVED_ENV)
    # What each pod no longer carries (twice: the field and its managedFields entry), against
    # the contract's values it still carries (the defaults after them are the template's to set).
    moved = sum(len(json.dumps({"name": k, "value": v})) for k, v in data.items())
    kept = [e for e in trainer["env"] if e["name"] in c.RESERVED_ENV]
    assert moved > 2 * len(json.dumps(kept))


def test_the_configmap_is_named_after_its_content_and_immutable() -> None:
    j = job(nodes=4)
    built = worker_env.build({"name": worker_env.name(j)}, j)
    assert built["immutable"] is True and built["data"] == worker_env.data(j)
    assert worker_env.name(j) == worker_env.name(job(nodes=4))  # the same values, the same name
    for other in (job(nodes=5), job(nodes=4, masterPort=29501), job(nodes=4, backend="nccl")):
        assert worker_env.name(other) != worker_env.name(j)
    # An elastic job's common values do not depend on its size: one ConfigMap at every size.
    assert worker_env.name(job(**SHAPES["elastic"])) == worker_env.name(
        job(**{**SHAPES["elastic"], "nodes": 4})
    )


def test_an_elastic_pod_keeps_the_values_of_the_size_it_was_created_for() -> None:
    at3, at5 = job(**SHAPES["elastic"]), job(**{**SHAPES["elastic"], "nodes": 5})
    # Resizing changes nothing common: a pod made at 3 reads the same ConfigMap.
    assert worker_env.data(at3) == worker_env.data(at5)
    assert not set(worker_env.PER_SIZE) & set(worker_env.data(at3))
    env = {
        e["name"]: e["value"]
        for e in builders.build_worker_pod(at3, 2)["spec"]["containers"][0]["env"]
        if "value" in e
    }
    assert (env["NNODES"], env["WORLD_SIZE"], env["VC_WORKER_NUM"]) == ("3", "3", "3")
    assert env["PET_RDZV_CONF"] == "is_host=0,keep_alive_interval=1,join_timeout=60"


def test_where_to_resume_is_carried_or_read_at_each_start_in_place() -> None:
    j = job(nodes=2)
    resume = {c.ENV_RESUME_STEP: "40", c.ENV_RESUME_PATH: "/ckpt/40"}
    pod = builders.build_worker_pod(j, 1, 2, resume=resume)
    assert env_of(pod, j)[c.ENV_RESUME_STEP] == "40"
    assert env_of(pod, j)[c.ENV_RESUME_PATH] == "/ckpt/40"
    first = builders.build_worker_pod(j, 1)["spec"]["containers"][0]  # no checkpoint yet
    assert not {e["name"] for e in first["env"]} & set(c.RESUME_ENV)
    kept = builders.build_worker_pod(j, 1, in_place=True, resume=resume)["spec"]["containers"][0]
    refs = [e["valueFrom"]["configMapKeyRef"] for e in kept["env"] if e["name"] in c.RESUME_ENV]
    assert refs == [
        {"name": job_configmap.name(j.name), "key": k, "optional": True} for k in c.RESUME_ENV
    ]
    configmaps = {job_configmap.name(j.name): job_configmap.data(2, "h", 2, resume)}
    resolved, _ = worker_env.resolve(kept, configmaps)
    assert resolved[c.ENV_RESUME_STEP] == "40"
    resolved, missing = worker_env.resolve(
        kept, {job_configmap.name(j.name): job_configmap.data(2, "h", 0)}
    )
    assert c.ENV_RESUME_STEP not in resolved and not any("RESUME" in m for m in missing)
    mine = {"name": c.ENV_RESUME_STEP, "value": "7"}  # a resume forced by hand wins
    template = {"spec": {"containers": [{"name": "trainer", "image": "t", "env": [mine]}]}}
    forced = builders.build_worker_pod(job(nodes=2, template=template), 1, in_place=True)
    assert [e for e in forced["spec"]["containers"][0]["env"] if e["name"] in c.RESUME_ENV] == [
        {"name": c.ENV_RESUME_PATH, "valueFrom": {"configMapKeyRef": refs[1]}},
        mine,
    ]


def test_the_templates_env_keeps_precedence_and_ours_beats_its_envfrom() -> None:
    trainer = {
        "name": "trainer",
        "image": "t",
        "envFrom": [{"configMapRef": {"name": "settings"}}],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "0"},
            {"name": "MASTER_ADDR", "value": "mine"},  # refused by the CRD; dropped here
            {"name": "ENDPOINT", "value": "$(MASTER_ADDR):$(MASTER_PORT)"},
        ],
    }
    j = job(nodes=2, template={"spec": {"containers": [trainer]}})
    built = builders.build_worker_pod(j, 0)["spec"]["containers"][0]
    assert built["envFrom"][0] == {"configMapRef": {"name": "settings"}}  # ours last: it wins
    configmaps = worker_env.configmaps(j, 0, builders.worker_hosts(j))
    configmaps["settings"] = {"MASTER_ADDR": "wrong", "LR": "0.1"}
    env, missing = worker_env.resolve(built, configmaps)
    assert not missing
    assert env["MASTER_ADDR"] == "train-worker-0.train" and env["LR"] == "0.1"
    assert env["PYTHONUNBUFFERED"] == "0" and env["ENDPOINT"] == "train-worker-0.train:29500"


def test_resolve_follows_the_kubelet_order_and_names_what_it_cannot_read() -> None:
    container = {
        "envFrom": [
            {"configMapRef": {"name": "a"}},
            {"configMapRef": {"name": "b"}, "prefix": "B_"},
            {"secretRef": {"name": "s"}},
        ],
        "env": [
            {"name": "X", "value": "$(K)-$(B_K)-$$(K)"},
            {"name": "K", "value": "env"},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    }
    env, missing = worker_env.resolve(container, {"a": {"K": "a"}, "b": {"K": "b"}}, {"P": "1"})
    assert env == {"P": "1", "K": "env", "B_K": "b", "X": "a-b-$(K)"}
    assert missing == ["envFrom {'secretRef': {'name': 's'}}", "env S (valueFrom)"]


def test_the_operator_sees_which_pods_read_the_common_configmap() -> None:
    j = job(nodes=2)
    pod = builders.build_worker_pod(j, 0, 0, True)
    pod["status"] = {"phase": "Running"}
    seen = observe(pod)
    assert seen is not None and seen.env_from == (worker_env.name(j),)
    assert worker_env.read_by(j, [seen])
    assert not worker_env.read_by(j, [replace(seen, deleting=True)])
    assert not worker_env.read_by(job(nodes=3), [seen])  # another content, another name
