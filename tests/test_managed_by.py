"""``spec.managedBy``: a job another controller manages (Kueue's MultiKueue on its manager
cluster) is left entirely to it: no object, no status, no Event, nothing of kopf's on it; the
field is immutable, checked at apply time."""

from __future__ import annotations

import pytest

from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import managed_here

from harness import jobs
from harness.cluster import Cluster
from harness.jobs import wait_running, workers
from jobs import ddpjob

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def test_unset_or_ours_is_managed_here_anything_else_is_not() -> None:
    assert managed_here(ddpjob("j"))
    assert managed_here(ddpjob("j", managedBy=c.MANAGED_BY))
    assert not managed_here(ddpjob("j", managedBy=MULTIKUEUE))


@pytest.mark.cluster
def test_a_job_another_controller_manages_is_left_alone(
    cluster: Cluster, namespace: str, operator
) -> None:
    jobs.apply(cluster, ddpjob("elsewhere", namespace, nodes=2, managedBy=MULTIKUEUE))
    # A job applied after it, ours by name, runs: the operator has seen both by then.
    jobs.apply(cluster, ddpjob("here", namespace, nodes=2, managedBy=c.MANAGED_BY))
    wait_running(cluster, namespace, "here", 2)
    jobs.wait_phase(cluster, namespace, "here", "Running")
    foreign = jobs.get(cluster, namespace, "elsewhere")
    assert "status" not in foreign or not foreign["status"], foreign.get("status")
    meta = foreign["metadata"]
    assert not meta.get("finalizers"), meta
    assert not [k for k in meta.get("annotations") or {} if k.startswith(c.GROUP)], meta
    assert workers(cluster, namespace, "elsewhere") == []
    assert jobs.events(cluster, namespace, "elsewhere") == []
    names = {s.metadata.name for s in cluster.core.list_namespaced_service(namespace).items}
    assert "elsewhere" not in names and "here" in names
    configmaps = cluster.core.list_namespaced_config_map(namespace).items
    assert not [m for m in configmaps if m.metadata.name.startswith("elsewhere")]


@pytest.mark.cluster
def test_managed_by_cannot_be_changed_added_or_removed(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("mk", namespace, suspend=True, managedBy=MULTIKUEUE))
    jobs.apply(cluster, ddpjob("plain", namespace, suspend=True))
    for name, spec in (
        ("mk", {"managedBy": c.MANAGED_BY}),  # changed
        ("mk", {}),  # removed
        ("plain", {"managedBy": MULTIKUEUE}),  # added
    ):
        result = jobs.apply(cluster, ddpjob(name, namespace, suspend=True, **spec), check=False)
        assert result.returncode != 0 and "spec.managedBy" in result.stderr, (spec, result.stderr)
    assert jobs.get(cluster, namespace, "mk")["spec"]["managedBy"] == MULTIKUEUE
