"""The node affinity that keeps a worker off the nodes its job keeps out (``node_avoid``):
added to every term of the template's own required affinity, or as the one term. Pure."""

from __future__ import annotations

import copy

from ddp_operator.manifests import builders, node_avoid
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob

# One value per requirement: the API server refuses more in a node field selector's NotIn.
NOT_IN = [
    {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-3"]},
    {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-7"]},
]


def terms(pod: dict) -> list[dict]:
    required = pod["spec"]["affinity"]["nodeAffinity"]
    return required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_a_pod_without_affinity_gets_one_term():
    pod = builders.build_worker_pod(resolve(ddpjob("j", "ns", nodes=2)), 1, 0)
    node_avoid.keep_off(pod, ["gpu-7", "gpu-3", "gpu-3"])
    assert terms(pod) == [{"matchFields": NOT_IN}]


def test_nothing_to_avoid_changes_nothing():
    pod = builders.build_worker_pod(resolve(ddpjob("j", "ns", nodes=2)), 1, 0)
    before = copy.deepcopy(pod)
    assert node_avoid.keep_off(pod, []) == before


def test_every_term_of_the_template_s_own_affinity_keeps_the_nodes_out():
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    mine = {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-9"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchFields": [mine]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [zone]}}
            ],
        }
    }
    template = {"spec": {"affinity": affinity, "containers": [{"name": "trainer", "image": "x"}]}}
    job = resolve(ddpjob("j", "ns", nodes=2, template=template))
    pod = node_avoid.keep_off(builders.build_worker_pod(job, 0, 0), ["gpu-3", "gpu-7"])
    assert terms(pod) == [
        {"matchExpressions": [zone], "matchFields": NOT_IN},
        {"matchFields": [mine, *NOT_IN]},
    ]
    preferred = pod["spec"]["affinity"]["nodeAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 1
    assert job.template["spec"]["affinity"] == affinity  # the job's template untouched
