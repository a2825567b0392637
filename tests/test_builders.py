"""Unit tests of the pure builders: a DDPJob in, manifests out."""

from __future__ import annotations

import pytest
import yaml

from ddp_operator.manifests import builders
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import SpecError, resolve

from harness.cluster import CRD_FILE
from jobs import ddpjob, env_of


def job(**spec):
    body = ddpjob("train", "ml", **spec)
    body["metadata"]["uid"] = "uid-1"
    return resolve(body)


def test_env_contract_for_one_process_per_node() -> None:
    j = job(nodes=3)
    env = env_of(builders.build_worker_pod(j, 2), j)
    assert env["MASTER_ADDR"] == "train-worker-0.train"
    assert env["MASTER_PORT"] == "29500"
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("3", "2", "1")
    assert (env["WORLD_SIZE"], env["RANK"], env["LOCAL_RANK"]) == ("3", "2", "0")
    assert env["PET_NNODES"] == "3" and env["PET_NODE_RANK"] == "2"
    assert env["PET_NPROC_PER_NODE"] == "1"
    assert env["PET_MASTER_ADDR"] == "train-worker-0.train" and env["PET_MASTER_PORT"] == "29500"
    assert env["DDP_BACKEND"] == "gloo"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["MA_NUM_HOSTS"] == "3" and env["MA_TASK_NAME"] == "worker"
    assert env["MA_VJ_NAME"] == "train" and env["MA_NUM_GPUS"] == "1"
    assert (env["VC_TASK_INDEX"], env["VC_WORKER_NUM"]) == ("2", "3")
    assert (
        env["VC_WORKER_HOSTS"] == "train-worker-0.train,train-worker-1.train,train-worker-2.train"
    )
    # ModelArts scripts build the master's name themselves: it must be worker-0's DNS name.
    ma_master = f"{env['MA_VJ_NAME']}-{env['MA_TASK_NAME']}-0.{env['MA_VJ_NAME']}"
    assert ma_master == env["MASTER_ADDR"] == env["VC_WORKER_HOSTS"].split(",")[0]
    assert "PET_RDZV_BACKEND" not in env


def test_gpu_job_gets_nccl_and_world_size_counts_processes() -> None:
    j = job(nodes=2, accelerator={"resource": "nvidia.com/gpu", "perNode": 8})
    pod = builders.build_worker_pod(j, 1)
    env = env_of(pod, j)
    assert env["WORLD_SIZE"] == "16" and env["NPROC_PER_NODE"] == "8"
    assert "RANK" not in env  # per-process ranks come from the launcher
    assert env["DDP_BACKEND"] == "nccl" and env["MA_NUM_GPUS"] == "8"
    res = pod["spec"]["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "8" and res["requests"]["nvidia.com/gpu"] == "8"


def test_ascend_job_gets_hccl_ports_reserved() -> None:
    j = job(accelerator={"resource": "huawei.com/Ascend910", "perNode": 8, "hcclBasePort": 61000})
    pod = builders.build_worker_pod(j, 0)
    env = env_of(pod, j)
    assert env["DDP_BACKEND"] == "hccl" and env["HCCL_IF_BASE_PORT"] == "61000"
    sysctls = pod["spec"]["securityContext"]["sysctls"]
    assert {"name": "net.ipv4.ip_local_reserved_ports", "value": "61000-61031"} in sysctls
    assert pod["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == "8"


def test_pod_shape() -> None:
    j = job(nodes=2, shmSize="8Gi", schedulerName="volcano", gangScheduling={})
    pod = builders.build_worker_pod(j, 1, attempt=2)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "train-worker-1" and meta["namespace"] == "ml"
    assert spec["hostname"] == "train-worker-1" and spec["subdomain"] == "train"
    assert spec["restartPolicy"] == "Never" and spec["schedulerName"] == "volcano"
    assert meta["labels"][c.LABEL_JOB] == "train"
    assert meta["labels"][c.LABEL_INDEX] == "1" and meta["labels"][c.LABEL_ATTEMPT] == "2"
    owner = meta["ownerReferences"][0]
    assert owner["kind"] == "DDPJob" and owner["uid"] == "uid-1" and owner["controller"] is True
    assert {"name": c.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in spec[
        "volumes"
    ]
    assert {"name": c.SHM_VOLUME, "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]
    # gangScheduling present but empty: Kubernetes' own gang, the job's name is the PodGroup.
    assert spec["schedulingGroup"] == {"podGroupName": "train"}
    assert env_of(pod, j)["DDP_ATTEMPT"] == "2"


def test_trainer_container_is_found_by_name_and_user_env_follows_ours() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "sidecar", "image": "busybox"},
                {
                    "name": "trainer",
                    "image": "t",
                    "env": [{"name": "ENDPOINT", "value": "$(MASTER_ADDR):$(MASTER_PORT)"}],
                },
            ]
        }
    }
    j = job(template=template)
    pod = builders.build_worker_pod(j, 0)
    sidecar, trainer = pod["spec"]["containers"]
    assert "env" not in sidecar and "envFrom" not in sidecar
    names = [e["name"] for e in trainer["env"]]
    assert names.index("NODE_RANK") < names.index("ENDPOINT")  # its own values first
    # The common ones come by envFrom, which the kubelet resolves before env: a reference works.
    assert env_of(pod, j)["ENDPOINT"] == "train-worker-0.train:29500"


def test_elastic_job_uses_c10d_rendezvous() -> None:
    j = job(nodes=3, minNodes=2, maxNodes=4)
    env0 = env_of(builders.build_worker_pod(j, 0), j)
    env1 = env_of(builders.build_worker_pod(j, 1), j)
    assert env0["PET_NNODES"] == "2:4"
    assert env0["PET_RDZV_BACKEND"] == "c10d"
    assert env0["PET_RDZV_ENDPOINT"] == "train-worker-0.train:29500"
    assert env0["PET_RDZV_ID"] == "uid-1"
    assert (env0["PET_RDZV_CONF"], env1["PET_RDZV_CONF"]) == (
        "is_host=1,keep_alive_interval=1",
        "is_host=0,keep_alive_interval=1",
    )


def test_service_is_headless_and_publishes_unready_pods() -> None:
    svc = builders.build_service(job())
    assert svc["metadata"]["name"] == "train"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {c.LABEL_JOB: "train"}
    assert svc["spec"]["ports"][0]["port"] == 29500


def test_user_shm_mount_is_respected() -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "t",
                    "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "s", "emptyDir": {}}],
        }
    }
    pod = builders.build_worker_pod(job(template=template), 0)
    assert [v["name"] for v in pod["spec"]["volumes"] if v["name"] != "ddp-flight-recorder"] == [
        "s"
    ]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodes": 0}, "spec.nodes"),
        (
            {"procsPerNode": 3, "accelerator": {"resource": "nvidia.com/gpu", "perNode": 8}},
            "procsPerNode",
        ),
    ],
)
def test_resolve_refuses_what_the_crd_refuses(spec: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        resolve(ddpjob("j", **spec))


def test_reserved_env_names_match_the_crd() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    containers = spec["properties"]["template"]["properties"]["spec"]["properties"]["containers"]
    env_name = containers["items"]["properties"]["env"]["items"]["properties"]["name"]
    rule = env_name["x-kubernetes-validations"][0]["rule"]
    listed = rule[rule.index("[") + 1 : rule.index("]")]
    names = [n.strip().strip("'") for n in listed.split(",")]
    assert names == list(c.RESERVED_ENV)


def test_workers_leave_a_lost_node_after_a_bounded_grace_unless_the_template_says() -> None:
    pod = builders.build_worker_pod(resolve(ddpjob("t", nodes=1)), 0)
    tol = {t["key"]: t for t in pod["spec"]["tolerations"]}
    for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"):
        assert tol[key]["effect"] == "NoExecute" and tol[key]["tolerationSeconds"] == 30
    own = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 5,
    }
    body = ddpjob("t", nodes=1)
    body["spec"]["template"]["spec"]["tolerations"] = [own]
    tol = builders.build_worker_pod(resolve(body), 0)["spec"]["tolerations"]
    assert own in tol and len([t for t in tol if t["key"] == own["key"]]) == 1
    body["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert builders.build_worker_pod(resolve(body), 0)["spec"]["tolerations"] == [
        {"operator": "Exists"}
    ]


def test_nccl_jobs_get_pytorch_s_watchdogs_consistent_with_stall_detection() -> None:
    gpu = {"resource": "nvidia.com/gpu", "perNode": 8}
    j = job(accelerator=gpu, stallDetection={"timeoutSeconds": 90})
    env = env_of(builders.build_worker_pod(j, 0), j)
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "90"
    assert (
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    )
    auto = job(accelerator=gpu)
    assert (
        env_of(builders.build_worker_pod(auto, 0), auto)["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]
        == "300"
    )
    for other in (job(), job(accelerator=gpu, stallDetection={"enabled": False})):  # gloo, off
        assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" not in env_of(
            builders.build_worker_pod(other, 0), other
        )
    # gloo records into the flight recorder too (its new name alone), that a hung rank reads.
    gloo = env_of(builders.build_worker_pod(job(), 0), job())
    assert gloo["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in gloo
    off = job(stallDetection={"enabled": False})
    assert "TORCH_FR_BUFFER_SIZE" not in env_of(builders.build_worker_pod(off, 0), off)
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "t",
                    "env": [{"name": "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "value": "900"}],
                }
            ]
        }
    }
    mine = job(accelerator=gpu, template=template)
    assert (
        env_of(builders.build_worker_pod(mine, 0), mine)["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]
        == "900"
    )
    # The flight recorder's buffer under both names (the process group reads the old, the
    # recorder the new, from torch 2.8; recording nothing by default up to 2.10).
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    container = template["spec"]["containers"][0]
    container["env"] = [{"name": "TORCH_FR_BUFFER_SIZE", "value": "5000"}]
    theirs = env_of(builders.build_worker_pod(job(accelerator=gpu, template=template), 0), mine)
    assert theirs["TORCH_FR_BUFFER_SIZE"] == theirs["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "5000"


def test_a_rank_s_flight_recorder_dump_outlives_its_container() -> None:
    """A rank's flight-recorder dump (NCCL's on a collective's timeout, seen on an H200: 1.5 KB
    for 4 collectives; a quiet rank's own, ``progress_stacks.keep_dump``) goes to the pod's own
    emptyDir, kept across an in-place restart; a template's own dump path is kept, with no
    volume; a job without stall detection gets none."""
    gpu = {"resource": "nvidia.com/gpu", "perNode": 8}
    for j in (job(accelerator=gpu), job()):  # NCCL, gloo
        pod = builders.build_worker_pod(j, 0, in_place=True)
        prefix = env_of(pod, j)["TORCH_FR_DUMP_TEMP_FILE"]
        assert prefix == "/ddp-flight-recorder/comm_lib_trace_rank_"
        assert {"name": "ddp-flight-recorder", "emptyDir": {}} in pod["spec"]["volumes"]
        trainer = pod["spec"]["containers"][0]
        mount = {"name": "ddp-flight-recorder", "mountPath": "/ddp-flight-recorder"}
        assert mount in trainer["volumeMounts"]
    for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        own = {"name": "trainer", "image": "t", "env": [{"name": name, "value": "/data/fr_"}]}
        mine = job(accelerator=gpu, template={"spec": {"containers": [own]}})
        pod = builders.build_worker_pod(mine, 0)
        env = env_of(pod, mine)
        assert env[name] == "/data/fr_" and len([k for k in env if "_TEMP_FILE" in k]) == 1
        assert "ddp-flight-recorder" not in str(pod["spec"])
    theirs = {"name": "trainer", "image": "t"}
    theirs["volumeMounts"] = [{"name": "data", "mountPath": "/ddp-flight-recorder"}]
    template = {"spec": {"containers": [theirs], "volumes": [{"name": "data", "emptyDir": {}}]}}
    pod = builders.build_worker_pod(job(template=template), 0)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["data", "ddp-shm"]
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["name"] == "data"
    for off in (
        job(stallDetection={"enabled": False}),
        job(accelerator=gpu, stallDetection={"enabled": False}),
    ):
        assert "ddp-flight-recorder" not in str(builders.build_worker_pod(off, 0))


def test_the_trainer_leaves_its_last_lines_as_its_termination_message() -> None:
    j = job()
    trainer = builders.build_worker_pod(j, 0)["spec"]["containers"][0]
    assert trainer["terminationMessagePolicy"] == "FallbackToLogsOnError"
    template = {
        "spec": {
            "containers": [{"name": "trainer", "image": "t", "terminationMessagePolicy": "File"}]
        }
    }
    mine = job(template=template)
    assert (
        builders.build_worker_pod(mine, 0)["spec"]["containers"][0]["terminationMessagePolicy"]
        == "File"
    )
