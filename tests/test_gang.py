"""Unit tests of gang scheduling's pure parts: the group objects each scheduler gets, what the
worker pods carry to join them, the spec's rules and the GangScheduled condition. The real
schedulers: test_gang_scheduling.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ddp_operator.decide import startup
from ddp_operator.decide.conditions import Conditions, condition
from ddp_operator.manifests import builders, gang
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import SpecError, resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

GPUS = {"resource": "nvidia.com/gpu", "perNode": 8}


def job(**spec):
    body = ddpjob("train", "ml", **spec)
    body["metadata"]["uid"] = "uid-1"
    return resolve(body)


def objects(j):
    return gang.group_objects(j, builders.build_worker_pod(j, 0))


def test_no_gang_creates_nothing_and_leaves_the_pods_alone() -> None:
    j = job(nodes=3)
    assert objects(j) == []
    pod = builders.build_worker_pod(j, 0)
    assert "schedulingGroup" not in pod["spec"] and "schedulerName" not in pod["spec"]
    assert c.COSCHEDULING_LABEL not in pod["metadata"]["labels"]


def test_kubernetes_gang_is_a_workload_and_its_podgroup_owned_by_the_job() -> None:
    j = job(nodes=3, gangScheduling={})
    workload, group = objects(j)
    assert (workload.group, workload.version, workload.plural) == (
        "scheduling.k8s.io",
        "v1alpha2",
        "workloads",
    )
    assert (workload.kind, workload.name, group.kind, group.name, group.plural) == (
        "Workload",
        "train",
        "PodGroup",
        "train",
        "podgroups",
    )
    for obj in (workload, group):
        (owner,) = obj.manifest["metadata"]["ownerReferences"]
        assert owner["uid"] == "uid-1" and owner["controller"] and owner["kind"] == "DDPJob"
        assert obj.manifest["metadata"]["labels"][c.LABEL_JOB] == "train"
        assert obj.manifest["metadata"]["namespace"] == "ml"
    (template,) = workload.manifest["spec"]["podGroupTemplates"]
    assert template["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert workload.manifest["spec"]["controllerRef"] == {
        "apiGroup": "ddp-operator.io",
        "kind": "DDPJob",
        "name": "train",
    }
    assert group.manifest["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group.manifest["spec"]["podGroupTemplateRef"] == {
        "workload": {"workloadName": "train", "podGroupTemplateName": template["name"]}
    }
    pod = builders.build_worker_pod(j, 2)
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    assert "schedulerName" not in pod["spec"]  # the default scheduler


def test_kubernetes_gang_topology_key_constrains_the_template_and_the_group() -> None:
    j = job(nodes=2, gangScheduling={"topologyKey": "topology.kubernetes.io/zone"})
    workload, group = objects(j)
    wanted = {"topology": [{"key": "topology.kubernetes.io/zone"}]}
    assert workload.manifest["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == wanted
    assert group.manifest["spec"]["schedulingConstraints"] == wanted


def test_coscheduling_podgroup_min_member_timeout_and_the_whole_groups_resources() -> None:
    j = job(
        nodes=4,
        accelerator=GPUS,
        gangScheduling={"scheduler": "Coscheduling", "podGroup": "pg", "timeoutSeconds": 90},
    )
    (group,) = objects(j)
    assert group.manifest["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group.name == "pg"
    spec = group.manifest["spec"]
    assert spec["minMember"] == 4 and spec["scheduleTimeoutSeconds"] == 90
    assert spec["minResources"]["nvidia.com/gpu"] == "32"
    pod = builders.build_worker_pod(j, 0)
    assert pod["metadata"]["labels"][c.COSCHEDULING_LABEL] == "pg"
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert "schedulingGroup" not in pod["spec"]


def test_volcano_podgroup_queue_priority_and_the_users_scheduler_name() -> None:
    template = {
        "spec": {
            "priorityClassName": "high",
            "containers": [
                {
                    "name": "trainer",
                    "image": "t",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                }
            ],
        }
    }
    j = job(
        nodes=3,
        schedulerName="volcano-2",
        template=template,
        gangScheduling={"scheduler": "Volcano", "queue": "research"},
    )
    (group,) = objects(j)
    assert group.manifest["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    spec = group.manifest["spec"]
    assert (spec["minMember"], spec["queue"], spec["priorityClassName"]) == (3, "research", "high")
    assert spec["minResources"] == {"cpu": "1500m", "memory": str(3 * 2**30)}
    pod = builders.build_worker_pod(j, 1)
    assert pod["metadata"]["annotations"][c.VOLCANO_ANNOTATION] == "train"
    assert pod["spec"]["schedulerName"] == "volcano-2"  # spec.schedulerName wins


def test_min_resources_counts_limits_standing_in_for_requests() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "2"}}},
                {"resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}},
            ]
        }
    }
    assert gang.min_resources(pod, 2) == {"cpu": "4500m", "nvidia.com/gpu": "4"}


@pytest.mark.parametrize(
    ("gang_spec", "field"),
    [
        ({"scheduler": "Volcano", "topologyKey": "zone"}, "topologyKey"),
        ({"scheduler": "Kubernetes", "timeoutSeconds": 5}, "timeoutSeconds"),
        ({"queue": "q"}, "queue"),
        ({"scheduler": "Slurm"}, "scheduler"),
    ],
)
def test_options_a_scheduler_cannot_express_are_refused_naming_the_field(
    gang_spec: dict, field: str
) -> None:
    with pytest.raises(SpecError, match=f"spec.gangScheduling.{field}"):
        job(gangScheduling=gang_spec)


def pod(index: int, node: str | None = None, unschedulable: str | None = None) -> WorkerPod:
    return WorkerPod(f"train-worker-{index}", index, 0, node=node, unschedulable=unschedulable)


def test_gang_condition_says_how_many_are_placed_and_what_the_scheduler_said() -> None:
    j = job(nodes=3, gangScheduling={})
    conds = Conditions([], datetime.now(UTC), 1)
    live = [pod(0), pod(1, unschedulable="0/8 nodes are available"), pod(2)]
    startup.report(conds, live, 3, j.gang)
    cond = condition(conds.items, c.COND_GANG)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "WaitingForGang"
    assert cond["message"].startswith("0 of 3 workers placed")
    assert "Kubernetes group train" in cond["message"]
    assert "train-worker-1: 0/8 nodes are available" in cond["message"]
    assert [e.reason for e in conds.events] == ["Unschedulable", "WaitingForGang"]

    conds = Conditions(conds.items, datetime.now(UTC), 1)
    startup.report(conds, [pod(i, node=f"n{i}") for i in range(3)], 3, j.gang)
    cond = condition(conds.items, c.COND_GANG)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "GangScheduled"
    assert "GangScheduled" in [e.reason for e in conds.events]


def test_no_gang_condition_without_a_gang() -> None:
    conds = Conditions([], datetime.now(UTC), 1)
    startup.report(conds, [pod(0)], 2, None)
    assert condition(conds.items, c.COND_GANG) is None
