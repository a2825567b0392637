"""Every variable of the env contract, read in every process of real pods on the real node: the
kubelet resolving the job's ConfigMap of common values (``envFrom``), its host list (a key of
the job's other ConfigMap) and each pod's own values, against the contract as the builders state
it (``worker_env.contract``) and the precedence the README promises (the template's ``env`` over
ours, ours over the template's ``envFrom``, a template entry may refer to ours)."""

from __future__ import annotations

import json

import pytest

from ddp_operator.manifests import builders, worker_env
from ddp_operator.model.jobspec import resolve

from harness import jobs
from harness.cluster import Cluster
from harness.realnode import for_real_node
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(600)]

PRINT_ENV = "import json, os; print('ENV ' + json.dumps(dict(os.environ)), flush=True)"


def test_every_process_reads_every_variable_of_the_contract(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    # The template's own ConfigMap, taken whole, names one of ours: ours wins, its other keys
    # arrive; the template's env overrides a default of ours and refers to a common value.
    cluster.core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "settings"}, "data": {"MASTER_ADDR": "wrong", "LR": "0.1"}},
    )
    trainer = {
        "name": "trainer",
        "command": ["python3", "-c", PRINT_ENV],
        "envFrom": [{"configMapRef": {"name": "settings"}}],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "0"},
            {"name": "ENDPOINT", "value": "$(MASTER_ADDR):$(MASTER_PORT)"},
        ],
    }
    manifest = ddpjob("envs", namespace, nodes=2, template={"spec": {"containers": [trainer]}})
    jobs.apply(cluster, for_real_node(manifest, images["trainer"]))
    done = jobs.wait_phase(cluster, namespace, "envs", "Succeeded", timeout=300)
    job = resolve(done)
    pods = jobs.workers(cluster, namespace, "envs")
    assert len(pods) == 2
    for i, pod in enumerate(pods):
        # A pod carries only its own values; the common ones are the ConfigMap's.
        inline = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert not {k for k, _ in worker_env.contract(job, i) if worker_env.shared(job, k)} & inline
        log = cluster.core.read_namespaced_pod_log(
            pod["metadata"]["name"], namespace, container="trainer"
        )
        (line,) = [x for x in log.splitlines() if x.startswith("ENV ")]
        seen = json.loads(line[4:])
        want = {
            **dict(worker_env.contract(job, i, 0)),
            **dict(worker_env.defaults(job)),
            "VC_WORKER_HOSTS": builders.worker_hosts(job),
            "PYTHONUNBUFFERED": "0",
            "ENDPOINT": "envs-worker-0.envs:29500",
            "LR": "0.1",
        }
        assert {k: seen.get(k) for k in want} == want, f"worker {i}"
    common = cluster.core.read_namespaced_config_map(worker_env.name(job), namespace)
    assert common.metadata.owner_references[0].uid == done["metadata"]["uid"]
    assert common.immutable and common.data == worker_env.data(job)
