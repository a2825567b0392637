"""What keeps workers from starting reaches the job: a container the kubelet cannot start (a
mistyped image...) is a ``ContainersNotStarting`` condition and a Warning Event, with the
kubelet's reason and message; the job is neither restarted nor failed, and goes on once fixed."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import pytest

from ddp_operator.commands import jobview
from ddp_operator.decide.reconcile import plan
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.pod_status import Waiting
from ddp_operator.model.workers import WorkerPod

from harness import jobs, pods
from harness.cluster import Cluster
from harness.jobs import wait_running
from jobs import ddpjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PULL = 'failed to pull image "pytorch/pytroch:2.3": pull access denied'
BACKOFF = 'Back-off pulling image "pytorch/pytroch:2.3"'
own = functools.partial(WorkerPod, owner_uid="u")


def job(nodes: int = 2):
    body = ddpjob("j", "ns", nodes=nodes)
    body["metadata"]["uid"] = "u"
    return resolve(body)


def workers(n: int, stuck: dict[int, Waiting]) -> list[WorkerPod]:
    """``n`` workers, those in ``stuck`` Pending with a container that cannot start."""
    return [
        own(
            f"j-worker-{i}", i, 0, "Pending" if i in stuck else "Running", not_starting=stuck.get(i)
        )
        for i in range(n)
    ]


def advance(j, status: dict, observed: list[WorkerPod]):
    p = plan(j, status, observed, NOW, generation=1)
    return p, {**status, **p.status}


def cond(status: dict, type_: str = "ContainersNotStarting") -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def warnings(p) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in p.events if e.type == "Warning"]


def test_condition_and_event_carry_the_kubelets_reason_and_message() -> None:
    j = job()
    _, st = advance(j, {}, [])
    p, st = advance(j, st, workers(2, {1: Waiting("trainer", "ErrImagePull", PULL)}))
    c = cond(st)
    assert (c["status"], c["reason"]) == ("True", "ErrImagePull")
    assert c["message"] == f"j-worker-1: container trainer: {PULL}"
    assert warnings(p) == [("ErrImagePull", c["message"])]
    # Neither restarted nor failed: the kubelet retries, the user fixes the image.
    assert st["phase"] == "Pending" and st["restarts"] == 0 and p.delete == [] and p.create == []
    assert cond(st, "Running")["message"] == "1 of 2 workers running"


def test_several_workers_name_the_first_and_count_the_others() -> None:
    j = job(nodes=4)
    stuck = {i: Waiting("trainer", "InvalidImageName", f"bad name {i}") for i in (3, 1, 2)}
    _, st = advance(j, {}, workers(4, stuck))
    assert cond(st)["message"] == "j-worker-1: container trainer: bad name 1 (and 2 more workers)"
    _, st = advance(j, st, workers(4, {2: stuck[2], 3: stuck[3]}))
    assert cond(st)["message"] == "j-worker-2: container trainer: bad name 2 (and 1 more worker)"
    _, st = advance(j, st, workers(4, {0: Waiting("fetch", "ErrImageNeverPull")}))
    assert cond(st)["message"] == "j-worker-0: container fetch: ErrImageNeverPull"


def test_the_kubelets_retry_cycle_posts_no_new_event_but_a_new_cause_does() -> None:
    j = job()
    _, st = advance(j, {}, [])
    p, st = advance(j, st, workers(2, {0: Waiting("trainer", "ErrImagePull", PULL)}))
    assert len(warnings(p)) == 1
    for reason, message in [("ImagePullBackOff", BACKOFF), ("ErrImagePull", PULL)] * 2:
        p, st = advance(j, st, workers(2, {0: Waiting("trainer", reason, message)}))
        assert cond(st)["reason"] == reason and warnings(p) == []
    again, _ = advance(j, st, workers(2, {0: Waiting("trainer", "ErrImagePull", PULL)}))
    assert again.events == [] and again.status == st
    other = Waiting("trainer", "CreateContainerConfigError", 'secret "token" not found')
    p, st = advance(j, st, workers(2, {0: other}))
    assert [r for r, _ in warnings(p)] == ["CreateContainerConfigError"]


def test_condition_clears_once_no_container_is_stuck() -> None:
    j = job()
    _, st = advance(j, {}, [])
    _, st = advance(j, st, workers(2, {0: Waiting("trainer", "ErrImagePull", PULL)}))
    p, st = advance(j, st, workers(2, {}))
    c = cond(st)
    assert (c["status"], c["reason"]) == ("False", "NoStartErrors")
    assert st["phase"] == "Running" and warnings(p) == []
    _, fresh = advance(j, {}, workers(2, {}))
    assert "ContainersNotStarting" not in [c["type"] for c in fresh["conditions"]]


def test_a_finished_job_clears_it() -> None:
    j = job()
    _, st = advance(j, {}, workers(2, {0: Waiting("trainer", "ErrImagePull", PULL)}))
    done = [own(f"j-worker-{i}", i, 0, "Succeeded") for i in range(2)]
    _, st = advance(j, st, done)
    assert st["phase"] == "Succeeded" and cond(st)["status"] == "False"


def test_kubectl_ddp_status_shows_the_condition_and_each_workers_reason() -> None:
    body = ddpjob("v", "ns", nodes=2)
    body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    message = f"v-worker-0: container trainer: {BACKOFF} (and 1 more worker)"
    body["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "ContainersNotStarting",
                "status": "True",
                "reason": "ImagePullBackOff",
                "message": message,
            }
        ],
    }
    pod_list = []
    for i, (reason, msg) in enumerate([("ImagePullBackOff", BACKOFF), ("ErrImagePull", PULL)]):
        worker = builders.build_worker_pod(resolve(body), i, attempt=0)
        state = {"waiting": {"reason": reason, "message": msg}}
        worker["status"] = {
            "phase": "Pending",
            "containerStatuses": [{"name": "trainer", "state": state}],
        }
        pod_list.append(worker)
    lines = jobview.render_status(body, pod_list, now=NOW).splitlines()
    assert lines[1] == f"  ContainersNotStarting: {message}"
    assert lines[3].endswith(f"ImagePullBackOff: {BACKOFF}")
    assert lines[4].endswith(f"ErrImagePull: {PULL}")


@pytest.mark.cluster
@pytest.mark.usefixtures("operator")
def test_a_container_that_cannot_start_is_on_the_job(cluster: Cluster, namespace: str) -> None:
    jobs.apply(cluster, ddpjob("img", namespace, nodes=2))
    uids = [w["metadata"]["uid"] for w in wait_running(cluster, namespace, "img", 2)]
    pods.stall(cluster, namespace, "img-worker-1", "ErrImagePull", PULL)
    try:
        job = jobs.wait_condition(cluster, namespace, "img", "ContainersNotStarting")
        cond = jobs.condition(job, "ContainersNotStarting")
        assert cond["reason"] == "ErrImagePull"
        assert cond["message"] == f"img-worker-1: container trainer: {PULL}"
        (event,) = jobs.wait_event(cluster, namespace, "img", "ErrImagePull")
        assert event["type"] == "Warning" and event["message"] == cond["message"]
        job = jobs.wait_phase(cluster, namespace, "img", "Pending")
        assert job["status"]["restarts"] == 0
    finally:
        pods.unstall(cluster, namespace, "img-worker-1")
    # The kubelet's next try succeeds: the same pods run, the condition clears.
    job = jobs.wait_condition(cluster, namespace, "img", "ContainersNotStarting", status="False")
    assert jobs.condition(job, "ContainersNotStarting")["reason"] == "NoStartErrors"
    jobs.wait_phase(cluster, namespace, "img", "Running")
    assert [w["metadata"]["uid"] for w in wait_running(cluster, namespace, "img", 2)] == uids
