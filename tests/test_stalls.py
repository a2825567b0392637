"""Workers stalled before their first container, on the real API server and the real node
(``stalls``): the jobs of a namespace share one list of its Warning Events; a worker whose volume
names a missing ConfigMap puts the kubelet's FailedMount on the job, and creating the ConfigMap
lets the job run to Succeeded."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from ddp_operator.act import stalls
from ddp_operator.api.kube import Kube
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.pod_status import Waiting
from ddp_operator.model.workers import WorkerPod

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.realnode import kubectl_ddp, trainer_job
from jobs import ddpjob

pytestmark = [pytest.mark.cluster]


def warning(ns: str, uid: str, reason: str, message: str) -> dict:
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"generateName": "stall-", "namespace": ns},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": f"pod-{uid}", "uid": uid},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "kubelet"},
        "firstTimestamp": when,
        "lastTimestamp": when,
    }


def lists() -> float:
    """The operator's successful Event lists in this process."""
    sample = {"verb": "list_events", "code": "200"}
    return REGISTRY.get_sample_value("ddp_operator_api_requests_total", sample) or 0.0


def test_the_jobs_of_a_namespace_share_one_list_and_a_stalled_worker_gets_its_word(
    cluster: Cluster, quiet: str
) -> None:
    cluster.core.create_namespaced_event(quiet, warning(quiet, "p1", "FailedMount", "no cfg"))
    cluster.core.create_namespaced_event(quiet, warning(quiet, "p0", "FailedScheduling", "full"))
    body = ddpjob("j", quiet, nodes=2)
    body["metadata"]["uid"] = "u"
    job = resolve(body)
    bound = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = [
        WorkerPod(f"j-worker-{i}", i, 0, uid=f"p{i}", owner_uid="u", node="n", scheduled=bound)
        for i in range(2)
    ]

    async def two_jobs() -> list:
        reader = stalls.EventReader(Kube(cluster.api))
        return await asyncio.gather(*(stalls.explain(reader, job, pods, datetime.now(UTC))
                                      for _ in range(2)))  # fmt: skip

    before = lists()
    results = asyncio.run(two_jobs())
    assert lists() - before == 1  # one request answered both
    for explained, again in results:
        assert again == 5.0  # while a worker stays stalled
        assert explained[1].not_starting == Waiting("", "FailedMount", "no cfg")
        assert explained[0].not_starting is None  # the scheduler's word is not the kubelet's
    started = [dataclasses.replace(p, phase="Running") for p in pods]
    assert asyncio.run(
        stalls.explain(stalls.EventReader(Kube(cluster.api)), job, started, datetime.now(UTC))
    ) == (started, None)
    assert lists() - before == 1  # nothing stalled: no request


@pytest.mark.node
@pytest.mark.timeout(900)
def test_a_missing_configmap_is_on_the_job_until_it_is_created(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """The kubelet's FailedMount reaches the job's condition (naming the worker and the
    ConfigMap), one Warning Event and `kubectl ddp status`; creating the ConfigMap lets it run."""
    cm = f"settings-{uuid.uuid4().hex[:5]}"
    script = "cat /etc/settings/greeting && exec torchrun examples/scripts/allreduce.py"
    job = trainer_job("mount", namespace, images["trainer"], ["sh", "-c", script])
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "settings", "configMap": {"name": cm}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "settings", "mountPath": "/etc/settings"}]
    jobs.apply(cluster, job)

    def failed_mount() -> dict | None:
        cond = jobs.condition(jobs.get(cluster, namespace, "mount"), "ContainersNotStarting")
        return cond if cond and cond["reason"] == "FailedMount" else None

    cond = wait_for(failed_mount, timeout=60, what="FailedMount on the job")
    assert cond["status"] == "True", cond
    assert cond["message"].startswith("mount-worker-"), cond
    assert f'configmap "{cm}" not found' in cond["message"], cond
    events = jobs.wait_event(cluster, namespace, "mount", "FailedMount")
    assert len(events) == 1 and events[0]["type"] == "Warning", events
    assert f'configmap "{cm}" not found' in events[0]["message"], events

    def both_rows() -> str | None:  # each worker's REASON: its own FailedMount
        status = kubectl_ddp(cluster, "status", "mount", "-n", namespace)
        rows = [r for r in status.splitlines() if r.split()[0] in ("0", "1")]
        said = all("FailedMount: MountVolume.SetUp failed" in r for r in rows)
        return status if len(rows) == 2 and said else None

    status = wait_for(both_rows, timeout=60, what="FailedMount in kubectl ddp status")
    assert "ContainersNotStarting: mount-worker-" in status, status
    assert jobs.get(cluster, namespace, "mount")["status"]["phase"] == "Pending"

    cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": cm}, "data": {"greeting": "hello from the ConfigMap"}}
    )
    jobs.wait_phase(cluster, namespace, "mount", "Succeeded", timeout=300)
    done = jobs.get(cluster, namespace, "mount")
    assert jobs.condition(done, "ContainersNotStarting")["status"] == "False", done["status"]
    assert done["status"].get("restarts", 0) == 0, done["status"]
    log = cluster.core.read_namespaced_pod_log("mount-worker-0", namespace, container="trainer")
    assert "hello from the ConfigMap" in log, log


def test_events_that_cannot_be_read_are_said_on_the_worker_not_swallowed() -> None:
    """An API server that cannot be reached (here: a closed port on loopback) for the Events:
    the stalled worker carries that, for the job's condition, and the pass goes on."""
    from kubernetes import client

    config = client.Configuration(host="http://127.0.0.1:9")
    config.retries = 0
    job = resolve({**ddpjob("j", "ns"), "metadata": {"name": "j", "namespace": "ns", "uid": "u"}})
    bound = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = WorkerPod("j-worker-0", 0, 0, uid="p0", owner_uid="u", node="n", scheduled=bound)
    reader = stalls.EventReader(Kube(client.ApiClient(config)))
    (explained,), again = asyncio.run(stalls.explain(reader, job, [pod], datetime.now(UTC)))
    said = explained.not_starting
    assert again == 5.0 and said is not None and said.reason == "EventsUnreadable", said
    assert said.message.startswith("no container started; the pod's Events could not be read:")
    assert "refused" in said.message.lower(), said
