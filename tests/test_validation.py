"""Bad input is refused by `kubectl apply` itself (schema and CEL), naming the field, and
nothing is created for a refused job."""

from __future__ import annotations

import pytest

from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve

from harness import jobs
from harness.cluster import Cluster
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crd")]

GPU8 = {"resource": "nvidia.com/gpu", "perNode": 8}


def trainer_env(*names: str) -> dict:
    env = [{"name": n, "value": "x"} for n in names]
    return {"spec": {"containers": [{"name": "trainer", "image": "t", "env": env}]}}


CASES = [
    ("nodes-zero", {"nodes": 0}, "spec.nodes"),
    ("stall-too-short", {"stallDetection": {"timeoutSeconds": 10}}, "spec.stallDetection"),
    ("stall-not-bool", {"stallDetection": {"enabled": "maybe"}}, "spec.stallDetection.enabled"),
    ("negative-backoff", {"backoffLimit": -1}, "spec.backoffLimit"),
    ("negative-deadline", {"activeDeadlineSeconds": -5}, "spec.activeDeadlineSeconds"),
    ("negative-ttl", {"ttlSecondsAfterFinished": -1}, "spec.ttlSecondsAfterFinished"),
    ("port-high", {"masterPort": 70000}, "spec.masterPort"),
    ("port-zero", {"masterPort": 0}, "spec.masterPort"),
    ("procs-word", {"procsPerNode": "many"}, "spec.procsPerNode"),
    ("procs-zero", {"procsPerNode": 0}, "spec.procsPerNode"),
    ("procs-vs-gpus", {"procsPerNode": 3, "accelerator": GPU8}, "spec.procsPerNode"),
    ("procs-over-gpus", {"procsPerNode": 16, "accelerator": GPU8}, "spec.procsPerNode"),
    (
        "ascend-procs",
        {"procsPerNode": 4, "accelerator": {"resource": "huawei.com/Ascend910", "perNode": 8}},
        "spec.procsPerNode",
    ),
    (
        "ascend-three",
        {"accelerator": {"resource": "huawei.com/Ascend910", "perNode": 3}},
        "spec.accelerator.perNode",
    ),
    (
        "gpu-zero",
        {"accelerator": {"resource": "nvidia.com/gpu", "perNode": 0}},
        "spec.accelerator.perNode",
    ),
    ("hccl-on-cpu", {"backend": "hccl"}, "spec.backend"),
    ("bad-backend", {"backend": "nvlink"}, "spec.backend"),
    ("min-over-nodes", {"nodes": 2, "minNodes": 3}, "spec.minNodes"),
    ("reserved-env", {"template": trainer_env("OK_VAR", "MASTER_ADDR")}, "MASTER_ADDR"),
    ("reserved-rank", {"template": trainer_env("RANK")}, "RANK"),
    (
        "reserved-volume",
        {
            "template": {
                "spec": {
                    "containers": [{"name": "trainer", "image": "t"}],
                    "volumes": [
                        {"name": "data", "emptyDir": {}},
                        {"name": "ddp-shm", "emptyDir": {}},
                    ],
                }
            }
        },
        "volume name ddp-shm is reserved",
    ),
    (
        "reserved-volume-dumps",
        {
            "template": {
                "spec": {
                    "containers": [{"name": "trainer", "image": "t"}],
                    "volumes": [{"name": "ddp-flight-recorder", "emptyDir": {}}],
                }
            }
        },
        "volume name ddp-flight-recorder is reserved",
    ),
    ("bad-shm", {"shmSize": "lots"}, "spec.shmSize"),
    ("bad-cleanup", {"cleanPodPolicy": "Sometimes"}, "spec.cleanPodPolicy"),
    ("gang-scheduler", {"gangScheduling": {"scheduler": "Slurm"}}, "spec.gangScheduling.scheduler"),
    (
        "gang-group-name",
        {"gangScheduling": {"podGroup": "My_Group"}},
        "spec.gangScheduling.podGroup",
    ),
    (
        "gang-topology-volcano",
        {"gangScheduling": {"scheduler": "Volcano", "topologyKey": "zone"}},
        "spec.gangScheduling.topologyKey",
    ),
    ("gang-queue-kubernetes", {"gangScheduling": {"queue": "q"}}, "spec.gangScheduling.queue"),
    (
        "gang-timeout-volcano",
        {"gangScheduling": {"scheduler": "Volcano", "timeoutSeconds": 30}},
        "spec.gangScheduling.timeoutSeconds",
    ),
    (
        "allow-without-isolation",
        {"network": {"isolation": False, "allow": [{"ports": [{"port": 8000}]}]}},
        "spec.network.allow",
    ),
    (
        "peer-both-kinds",
        {
            "network": {
                "allow": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]
            }
        },
        "an ipBlock, or a podSelector",
    ),
    (
        "peer-bad-operator",
        {
            "network": {
                "allow": [
                    {
                        "from": [
                            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}
                        ]
                    }
                ]
            }
        },
        "spec.network.allow[0].from[0].podSelector.matchExpressions[0].operator",
    ),
    ("bad-port-protocol", {"network": {"allow": [{"ports": [{"protocol": "ICMP"}]}]}}, "protocol"),
]


@pytest.mark.parametrize(("name", "spec", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_spec_is_refused_naming_the_field(
    cluster: Cluster, namespace: str, name: str, spec: dict, field: str
) -> None:
    result = jobs.apply(cluster, ddpjob(name, namespace, **spec), check=False)
    assert result.returncode != 0, result.stdout
    assert field in result.stderr, result.stderr
    assert jobs.get(cluster, namespace, name) is None
    assert not cluster.core.list_namespaced_pod(namespace).items


OK_RULE = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}


def exit_codes(operator: str = "In", **more: object) -> dict:
    return {"action": "FailJob", "onExitCodes": {"operator": operator, **more}}


# (id, rules, the field path named, words of the API server's answer)
POLICY_CASES = [
    (
        "unknown-action",
        [{"action": "Retry", "onReasons": ["OOMKilled"]}],
        "spec.failurePolicy.rules[0].action",
        "Unsupported value",
    ),
    (
        "no-matcher",
        [OK_RULE, {"name": "catch-all", "action": "FailJob"}],
        "spec.failurePolicy.rules[1]",
        "a rule needs at least one matcher",
    ),
    (
        "empty-reasons",
        [{"action": "FailJob", "onReasons": []}],
        "spec.failurePolicy.rules[0].onReasons",
        "at least 1 items",
    ),
    (
        "exit-codes-equals",
        [exit_codes("Equals", values=[1])],
        "spec.failurePolicy.rules[0].onExitCodes.operator",
        "Unsupported value",
    ),
    (
        "exit-codes-no-values",
        [exit_codes()],
        "spec.failurePolicy.rules[0].onExitCodes.values",
        "Required value",
    ),
    (
        "exit-codes-empty-values",
        [exit_codes(values=[])],
        "spec.failurePolicy.rules[0].onExitCodes.values",
        "at least 1 items",
    ),
    (
        "exit-code-300",
        [exit_codes(values=[1, 300])],
        "spec.failurePolicy.rules[0].onExitCodes.values[1]",
        "less than or equal to 255",
    ),
    (
        "exit-codes-twice",
        [exit_codes(values=[1, 1])],
        "spec.failurePolicy.rules[0].onExitCodes.values[1]",
        "Duplicate value",
    ),
    (
        "condition-without-type",
        [{"action": "FailJob", "onPodConditions": [{"reason": "PreemptionByScheduler"}]}],
        "spec.failurePolicy.rules[0].onPodConditions[0].type",
        "Required value",
    ),
    (
        "empty-pattern",
        [{"action": "FailJob", "onMessagePattern": ""}],
        "spec.failurePolicy.rules[0].onMessagePattern",
        "at least 1 chars",
    ),
    (
        "bad-pattern",
        [OK_RULE, {"action": "FailJob", "onMessagePattern": "CUDA (out of memory"}],
        "spec.failurePolicy.rules[1].onMessagePattern",
        "must be a regular expression",
    ),
    (
        # Python's re has lookahead, RE2 (the API server's) has not: keep to what both accept.
        "lookahead-pattern",
        [{"action": "FailJob", "onMessagePattern": "NCCL(?= error)"}],
        "spec.failurePolicy.rules[0].onMessagePattern",
        "must be a regular expression",
    ),
]


@pytest.mark.parametrize(
    ("name", "rules", "field", "words"), POLICY_CASES, ids=[c[0] for c in POLICY_CASES]
)
def test_bad_failure_policy_rule_is_refused_naming_the_field(
    cluster: Cluster, namespace: str, name: str, rules: list, field: str, words: str
) -> None:
    body = ddpjob(name, namespace, failurePolicy={"rules": rules})
    result = jobs.apply(cluster, body, check=False)
    assert result.returncode != 0, result.stdout
    assert field in result.stderr and words in result.stderr, result.stderr
    assert jobs.get(cluster, namespace, name) is None


def test_failure_policy_with_every_matcher_is_accepted_with_defaults(
    cluster: Cluster, namespace: str
) -> None:
    rules = [
        {
            "name": "script-bug",
            "action": "FailJob",
            "onExitCodes": {"operator": "In", "values": [1, 2]},
        },
        {
            "name": "preempted",
            "action": "RestartGroupNotCounted",
            "onPodConditions": [
                {"type": "DisruptionTarget", "reason": "PreemptionByScheduler"},
                {"type": "DisruptionTarget"},
            ],
        },
        {"action": "RestartGroup", "onReasons": ["OOMKilled", "Evicted"]},
        {
            "name": "flaky-nccl",
            "action": "ReplaceWorker",
            "onExitCodes": {"operator": "NotIn", "values": [0, 137]},
            "onReasons": ["Error"],
            "onMessagePattern": r"CUDA out of memory|NCCL (error|timeout)|\bECC\b",
        },
    ]
    body = ddpjob("policy", namespace, suspend=True, failurePolicy={"rules": rules})
    jobs.apply(cluster, body)
    policy = jobs.get(cluster, namespace, "policy")["spec"]["failurePolicy"]
    assert policy == {
        "maxUncountedRestarts": 10,
        "maxReplacements": 10,
        "maxRestartsWithoutProgress": 3,
        "maxExcludedNodes": 3,
        "blameNodeAfter": 2,
        "rules": rules,
    }
    # It may change on a live job.
    changed = {
        "maxUncountedRestarts": 0,
        "maxReplacements": 3,
        "maxRestartsWithoutProgress": 1,
        "rules": rules[:1],
    }
    jobs.apply(cluster, ddpjob("policy", namespace, suspend=True, failurePolicy=changed))
    defaults = {"maxExcludedNodes": 3, "blameNodeAfter": 2}
    assert jobs.get(cluster, namespace, "policy")["spec"]["failurePolicy"] == defaults | changed


def test_name_too_long_for_worker_pod_names(cluster: Cluster, namespace: str) -> None:
    fits = "a" * 53  # 53 + len("-worker-9") = 62
    assert jobs.apply(cluster, ddpjob(fits, namespace, nodes=10), check=False).returncode == 0
    too_long = "b" * 54  # 54 + len("-worker-10") = 64
    result = jobs.apply(cluster, ddpjob(too_long, namespace, nodes=11), check=False)
    assert result.returncode != 0 and "metadata.name" in result.stderr, result.stderr
    assert jobs.get(cluster, namespace, too_long) is None


def test_name_must_be_a_dns_label(cluster: Cluster, namespace: str) -> None:
    result = jobs.apply(cluster, ddpjob("9lives", namespace), check=False)
    assert result.returncode != 0 and "metadata.name" in result.stderr


def test_reserved_names_in_a_sidecar_are_refused_too(cluster: Cluster, namespace: str) -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "trainer", "image": "t"},
                {"name": "side", "image": "s", "env": [{"name": "WORLD_SIZE", "value": "1"}]},
            ]
        }
    }
    result = jobs.apply(cluster, ddpjob("side", namespace, template=template), check=False)
    assert result.returncode != 0 and "WORLD_SIZE" in result.stderr


def test_a_trainer_s_own_dev_shm_named_ddp_shm_is_kept(cluster: Cluster, namespace: str) -> None:
    """A template whose trainer mounts its own /dev/shm from a volume named ddp-shm (accepted
    before the name was reserved: the operator then adds none) still applies; a sidecar's
    mount does not count, the trainer's is the one the operator looks at."""
    shm = {"name": "ddp-shm", "emptyDir": {"medium": "Memory"}}
    mount = [{"name": "ddp-shm", "mountPath": "/dev/shm"}]
    template = {
        "spec": {
            "containers": [{"name": "trainer", "image": "t", "volumeMounts": mount}],
            "volumes": [shm],
        }
    }
    jobs.apply(cluster, ddpjob("own-shm", namespace, template=template))
    pod = builders.build_worker_pod(resolve(jobs.get(cluster, namespace, "own-shm")), 0)
    assert [v["name"] for v in pod["spec"]["volumes"]].count("ddp-shm") == 1, pod["spec"]
    template["spec"]["containers"] = [
        {"name": "trainer", "image": "t"},
        {"name": "side", "image": "s", "volumeMounts": mount},
    ]
    result = jobs.apply(cluster, ddpjob("side-shm", namespace, template=template), check=False)
    assert result.returncode != 0 and "volume name ddp-shm is reserved" in result.stderr


def test_defaults_are_filled_in(cluster: Cluster, namespace: str) -> None:
    body = ddpjob("defaults", namespace)
    del body["spec"]["nodes"]
    jobs.apply(cluster, body)
    spec = jobs.get(cluster, namespace, "defaults")["spec"]
    assert spec["nodes"] == 1 and spec["procsPerNode"] == "auto" and spec["backend"] == "auto"
    assert spec["masterPort"] == 29500 and spec["backoffLimit"] == 3
    assert spec["cleanPodPolicy"] == "Running" and spec["successPolicy"] == "AllWorkers"
    assert spec["suspend"] is False


def test_shape_of_a_live_job_is_immutable(cluster: Cluster, namespace: str) -> None:
    net = {"isolation": True}
    jobs.apply(cluster, ddpjob("fixed", namespace, nodes=2, accelerator=GPU8, network=net))
    for change, field in (
        ({"nodes": 3}, "spec.nodes"),
        ({"accelerator": {"resource": "nvidia.com/gpu", "perNode": 4}}, "spec.accelerator"),
        ({"masterPort": 29501}, "spec.masterPort"),
        ({"network": {"isolation": False}}, "spec.network"),
    ):
        spec = {"nodes": 2, "accelerator": GPU8, "network": net, **change}
        result = jobs.apply(cluster, ddpjob("fixed", namespace, **spec), check=False)
        assert result.returncode != 0 and field in result.stderr, (change, result.stderr)
    # What may change: suspend, backoffLimit, deadlines.
    ok = ddpjob(
        "fixed", namespace, nodes=2, accelerator=GPU8, network=net, suspend=True, backoffLimit=5
    )
    assert jobs.apply(cluster, ok, check=False).returncode == 0


def test_nodes_of_an_elastic_job_change_within_its_bounds(cluster: Cluster, namespace: str) -> None:
    bounds = {"minNodes": 2, "maxNodes": 3}
    jobs.apply(cluster, ddpjob("scales", namespace, nodes=3, suspend=True, **bounds))
    assert jobs.apply(cluster, ddpjob("scales", namespace, nodes=2, suspend=True, **bounds))
    assert jobs.get(cluster, namespace, "scales")["spec"]["nodes"] == 2
    for nodes, words in ((4, "spec.maxNodes"), (1, "spec.minNodes")):
        body = ddpjob("scales", namespace, nodes=nodes, suspend=True, **bounds)
        result = jobs.apply(cluster, body, check=False)
        assert result.returncode != 0 and words in result.stderr, (nodes, result.stderr)
    # Not elastic (minNodes == maxNodes): the size is fixed.
    fixed = {"minNodes": 2, "maxNodes": 2}
    jobs.apply(cluster, ddpjob("pinned", namespace, nodes=2, suspend=True, **fixed))
    result = jobs.apply(
        cluster, ddpjob("pinned", namespace, nodes=1, suspend=True, **fixed), check=False
    )
    assert (
        result.returncode != 0 and "spec.nodes may change only on an elastic job" in result.stderr
    )


def test_rdzv_conf_names_torchrun_options_but_not_is_host(cluster: Cluster, namespace: str) -> None:
    for conf, words in (
        ({"is_host": "1"}, "spec.rdzvConf.is_host"),
        ({"Last-Call": "5"}, "torchrun option names"),
        ({"last_call_timeout": "5,is_host=1"}, "spec.rdzvConf"),
    ):
        body = ddpjob("conf", namespace, nodes=2, minNodes=1, maxNodes=2, rdzvConf=conf)
        result = jobs.apply(cluster, body, check=False)
        assert result.returncode != 0 and words in result.stderr, (conf, result.stderr)
    body = ddpjob("conf", namespace, nodes=2, minNodes=1, maxNodes=2, suspend=True)
    body["spec"]["rdzvConf"] = {"last_call_timeout": "5"}
    jobs.apply(cluster, body)
