"""Workers stalled before their first container (``kubelet_events``): which are asked about, the
latest word of their Warning Events, and the job's condition and Event with it; it goes once the
pod starts. Pure (the real node's FailedMount is in tests/test_stalls.py)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from ddp_operator.commands import jobview
from ddp_operator.decide import kubelet_events
from ddp_operator.decide.reconcile import plan
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.pod_status import Waiting
from ddp_operator.model.workers import WorkerPod, observe

from jobs import ddpjob

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
MOUNT = 'MountVolume.SetUp failed for volume "cfg" : configmap "settings" not found'
own = functools.partial(WorkerPod, owner_uid="u", phase="Pending", node="n")


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(uid: str, reason: str, message: str, last: str, **more) -> dict:
    obj = {"kind": "Pod", "uid": uid, "name": f"pod-{uid}"}
    return {"involvedObject": obj, "reason": reason, "message": message, "type": "Warning",
            "lastTimestamp": last, **more}  # fmt: skip


def test_only_workers_bound_a_while_with_no_container_are_asked_about() -> None:
    pods = [
        own("w-0", 0, 0, uid="a", scheduled=ago(10)),  # stalled
        own("w-1", 1, 0, uid="b", scheduled=ago(1)),  # just bound: due in 1 s
        own("w-2", 2, 0, uid="c", phase="Running", scheduled=ago(10)),
        own("w-3", 3, 0, uid="d", scheduled=None, node=None),  # not bound yet
        own("w-4", 4, 0, uid="e", scheduled=ago(10), not_starting=Waiting("t", "ErrImagePull")),
        own("w-5", 5, 0, uid="f", scheduled=ago(10), deleting=True),
        own("w-6", 6, 0, uid="g", scheduled=ago(10), container_ran=True),  # init containers ran
    ]
    found, due = kubelet_events.stalled(pods, NOW)
    assert [p.name for p in found] == ["w-0"]
    assert due == 1.0


def test_a_pod_whose_init_container_ran_is_past_its_sandbox_and_mounts() -> None:
    def pod(init_state: dict) -> dict:
        labels = {"ddp-operator.io/job-name": "j", "ddp-operator.io/worker-index": "0"}
        waiting = {"state": {"waiting": {"reason": "PodInitializing"}}}
        return {
            "metadata": {"name": "j-worker-0", "uid": "p0", "labels": labels},
            "spec": {"nodeName": "n", "containers": [{"name": "trainer"}]},
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [{"name": "fetch", "state": init_state}],
                "containerStatuses": [{"name": "trainer", **waiting}],
            },
        }

    assert observe(pod({"running": {}})).container_ran
    assert observe(pod({"terminated": {"exitCode": 0}})).container_ran
    assert not observe(pod({"waiting": {"reason": "PodInitializing"}})).container_ran


def test_the_latest_warning_of_each_pod_is_its_word_and_the_schedulers_is_not() -> None:
    events = [
        event("a", "FailedMount", "old", ago(60)),
        event("a", "FailedMount", MOUNT, ago(50), series={"lastObservedTime": ago(1)}),
        event("a", "FailedCreatePodSandBox", "earlier", ago(30)),
        event("a", "FailedScheduling", "0/1 nodes are available", ago(0)),
        event("a", "DNSConfigForming", "nameserver limits exceeded", ago(0)),  # not a holdup
        event("b", "FailedCreatePodSandBox", "older", "2026-01-01T11:59:59Z"),
        event(
            "b",
            "FailedCreatePodSandBox",
            "shim: not found",
            None,
            eventTime="2026-01-01T11:59:59.900000Z",
        ),
        event("c", "FailedMount", "no time at all", None),
        event("x", "FailedMount", "another pod's", ago(0)),
    ]
    said = kubelet_events.latest(events, ["a", "b", "c"])
    assert said == {
        "a": Waiting("", "FailedMount", MOUNT),
        "b": Waiting("", "FailedCreatePodSandBox", "shim: not found"),
        "c": Waiting("", "FailedMount", "no time at all"),
    }


def test_the_job_says_it_naming_the_worker_once_and_clears_it_when_the_pod_starts() -> None:
    body = ddpjob("j", "ns", nodes=2)
    body["metadata"]["uid"] = "u"
    job = resolve(body)
    pods = [own(f"j-worker-{i}", i, 0, uid=f"p{i}", scheduled=ago(10)) for i in range(2)]
    said = kubelet_events.latest([event("p1", "FailedMount", MOUNT, ago(1))], ["p0", "p1"])
    first = plan(job, {}, kubelet_events.merged(pods, said), NOW, generation=1)
    cond = next(c for c in first.status["conditions"] if c["type"] == "ContainersNotStarting")
    assert cond["status"] == "True" and cond["reason"] == "FailedMount", cond
    assert cond["message"] == f"j-worker-1: FailedMount: {MOUNT}", cond
    assert [(e.type, e.reason) for e in first.events if e.reason == "FailedMount"] == [
        ("Warning", "FailedMount")
    ]
    # The kubelet's retries repeat it: no second Event.
    again = plan(job, first.status, kubelet_events.merged(pods, said), NOW, generation=1)
    assert not [e for e in again.events if e.reason == "FailedMount"]
    started = [own(f"j-worker-{i}", i, 0, uid=f"p{i}", phase="Running") for i in range(2)]
    after = plan(job, again.status, started, NOW, generation=1)
    cond = next(c for c in after.status["conditions"] if c["type"] == "ContainersNotStarting")
    assert cond["status"] == "False", cond


def test_kubectl_ddp_status_shows_the_events_reason_for_a_worker_not_started() -> None:
    job = {"metadata": {"name": "j", "creationTimestamp": ago(30)}, "spec": {"nodes": 2}}

    def pod(i: int, phase: str, waiting: str | None) -> dict:
        labels = {"ddp-operator.io/job-name": "j", "ddp-operator.io/worker-index": str(i)}
        state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
        return {
            "metadata": {"name": f"j-worker-{i}", "uid": f"p{i}", "labels": labels},
            "spec": {"nodeName": "n", "containers": [{"name": "trainer"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
        }

    pods = [pod(0, "Running", None), pod(1, "Pending", "ContainerCreating")]
    events = [event("p1", "FailedMount", MOUNT, ago(1)), event("p0", "FailedMount", "x", ago(1))]
    text = jobview.render_status(job, pods, NOW, events=events)
    rows = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert rows["1"].endswith(f"FailedMount: {MOUNT}"), text
    assert "FailedMount" not in rows["0"], text  # running: the old warning is no news
    assert "ContainerCreating" in jobview.render_status(job, pods, NOW)
