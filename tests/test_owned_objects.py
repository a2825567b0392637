"""What a running job owns, restored while it runs (``decide/owned``, ``api/ownedwatch``), on the
real API server with kwok nodes: its Service and ConfigMap deleted mid-run come back within
seconds (the ConfigMap with the attempt the job runs), its NetworkPolicy too, with the job's
Events and conditions saying so, and a policy changed by hand is put back."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from ddp_operator.model import constants as c

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.jobs import wait_running
from jobs import ddpjob

pytestmark = pytest.mark.cluster

BACK_WITHIN = 10.0  # seconds: the watch event and one pass (well under, in practice)


def service(cluster: Cluster, ns: str, name: str):
    found = cluster.core.list_namespaced_service(ns, field_selector=f"metadata.name={name}")
    return found.items[0] if found.items else None


def configmap(cluster: Cluster, ns: str, name: str):
    found = cluster.core.list_namespaced_config_map(ns, field_selector=f"metadata.name={name}")
    return found.items[0] if found.items else None


def policy(cluster: Cluster, ns: str, name: str):
    found = client.NetworkingV1Api(cluster.api).list_namespaced_network_policy(
        ns, field_selector=f"metadata.name={name}"
    )
    return found.items[0] if found.items else None


def back(get, old_uid: str, what: str):
    """The object once created again (another UID), timed."""
    started = time.monotonic()
    obj = wait_for(
        lambda: (o := get()) is not None and o.metadata.uid != old_uid and o,
        timeout=BACK_WITHIN,
        interval=0.2,
        what=f"{what} created again",
    )
    return obj, time.monotonic() - started


def condition(cluster: Cluster, ns: str, name: str, type_: str) -> dict:
    status = (jobs.get(cluster, ns, name) or {}).get("status") or {}
    return next((x for x in status.get("conditions") or [] if x["type"] == type_), {})


def restored(cluster: Cluster, ns: str, name: str) -> list[dict]:
    """The job's ObjectsRestored Events, oldest first."""
    return [e for e in jobs.events(cluster, ns, name) if e["reason"] == "ObjectsRestored"]


def test_the_service_and_configmap_deleted_mid_run_come_back_within_seconds(
    cluster: Cluster, namespace: str, operator
) -> None:
    jobs.apply(cluster, ddpjob("kept", namespace, nodes=2, backoffLimit=2))
    wait_running(cluster, namespace, "kept", 2)
    jobs.wait_phase(cluster, namespace, "kept", "Running")
    svc = service(cluster, namespace, "kept")
    cluster.core.delete_namespaced_service("kept", namespace)
    svc2, took = back(lambda: service(cluster, namespace, "kept"), svc.metadata.uid, "Service")
    assert svc2.spec.cluster_ip == "None" and svc2.spec.selector == {c.LABEL_JOB: "kept"}
    assert svc2.metadata.owner_references[0].name == "kept", svc2.metadata
    # A group restart moves the attempt; the ConfigMap deleted after it comes back saying it.
    pods.finish(cluster, namespace, "kept-worker-0", 1)
    wait_running(cluster, namespace, "kept", 2, attempt=1)
    env = "kept-ddp-env"
    wait_for(
        lambda: (m := configmap(cluster, namespace, env)) and m.data[c.ENV_ATTEMPT] == "1",
        timeout=15,
        what="attempt 1 in the ConfigMap",
    )
    old = configmap(cluster, namespace, env)
    cluster.core.delete_namespaced_config_map(env, namespace)
    cm, took_cm = back(lambda: configmap(cluster, namespace, env), old.metadata.uid, "ConfigMap")
    assert cm.data == old.data, (cm.data, old.data)  # the attempt and the host list
    # One Event for each restoration, the second posted after the first: both awaited.
    said = wait_for(
        lambda: (
            (got := " | ".join(e["message"] for e in restored(cluster, namespace, "kept")))
            and f"ConfigMap {env} missing" in got
            and got
        ),
        timeout=15,
        what="the ConfigMap's ObjectsRestored Event",
    )
    events = restored(cluster, namespace, "kept")
    assert "Service kept missing" in said, said
    assert all(e["type"] == "Warning" for e in events)
    owned = condition(cluster, namespace, "kept", "OwnedObjects")
    assert owned.get("reason") == "ObjectsRestored", owned
    assert took < 5 and took_cm < 5, (took, took_cm)
    # Nothing of it failed the job: its workers run on.
    assert (jobs.get(cluster, namespace, "kept") or {})["status"]["phase"] == "Running"


def test_the_configmap_of_common_values_cannot_be_edited_and_comes_back_if_deleted(
    cluster: Cluster, namespace: str, operator
) -> None:
    """Every key of it is a variable of every worker at its next start: the API server refuses
    to change it (immutable); deleted, it comes back as it was."""
    jobs.apply(cluster, ddpjob("com", namespace, nodes=2))
    (pod, _) = wait_running(cluster, namespace, "com", 2)
    jobs.wait_phase(cluster, namespace, "com", "Running")
    name = pod["spec"]["containers"][0]["envFrom"][-1]["configMapRef"]["name"]
    assert name.startswith("com-ddp-common-")
    old = configmap(cluster, namespace, name)
    assert old.immutable and old.data["MASTER_ADDR"] == "com-worker-0.com"
    with pytest.raises(client.ApiException) as refused:
        cluster.core.patch_namespaced_config_map(name, namespace, {"data": {"MASTER_PORT": "1"}})
    assert refused.value.status == 422 and "immutable" in refused.value.body
    cluster.core.delete_namespaced_config_map(name, namespace)
    cm, took = back(lambda: configmap(cluster, namespace, name), old.metadata.uid, "ConfigMap")
    assert cm.data == old.data and cm.immutable and took < 5, (cm.data, took)
    events = jobs.wait_event(cluster, namespace, "com", "ObjectsRestored")
    assert any(f"ConfigMap {name} missing" in e["message"] for e in events), events
    assert (jobs.get(cluster, namespace, "com") or {})["status"]["phase"] == "Running"


def test_the_network_policy_deleted_comes_back_and_a_changed_one_is_put_back(
    cluster: Cluster, namespace: str, operator
) -> None:
    jobs.apply(cluster, ddpjob("iso", namespace, nodes=2, network={"isolation": True}))
    wait_running(cluster, namespace, "iso", 2)
    jobs.wait_phase(cluster, namespace, "iso", "Running")
    name = "iso-ddp-isolation"
    old = wait_for(lambda: policy(cluster, namespace, name), timeout=10, what="the policy")
    client.NetworkingV1Api(cluster.api).delete_namespaced_network_policy(name, namespace)
    new, took = back(lambda: policy(cluster, namespace, name), old.metadata.uid, "NetworkPolicy")
    assert took < 5, took
    assert cluster.api.sanitize_for_serialization(
        new.spec
    ) == cluster.api.sanitize_for_serialization(old.spec)
    events = jobs.wait_event(cluster, namespace, "iso", "NetworkPolicyRestored")
    assert "pods of other namespaces could reach the workers" in events[-1]["message"]
    isolated = condition(cluster, namespace, "iso", "Isolated")
    assert isolated.get("status") == "True" and isolated.get("reason") == "NetworkPolicyRestored"
    # An allow-all rule added by hand: taken out again.
    patch = {"spec": {"ingress": [*new.to_dict()["spec"]["ingress"], {}]}}
    patch = cluster.api.sanitize_for_serialization(patch)
    client.NetworkingV1Api(cluster.api).patch_namespaced_network_policy(name, namespace, patch)
    wait_for(
        lambda: len(policy(cluster, namespace, name).spec.ingress) == 1,
        timeout=BACK_WITHIN,
        interval=0.2,
        what="the policy put back",
    )
    # Its Event may trail an earlier ObjectsRestored one (the deletion's): awaited itself.
    wait_for(
        lambda: any("changed by hand" in e["message"] for e in restored(cluster, namespace, "iso")),
        timeout=15,
        what="the ObjectsRestored Event of the policy changed by hand",
    )
