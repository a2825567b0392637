"""In-place group restarts in real containers on the real node (``spec.restartStrategy:
InPlace``, the default): the kubelet restarts every container of every worker pod
(RestartAllContainers), keeping the pods, their UIDs, IPs and node; no pod is created or
scheduled again; ``DDP_ATTEMPT`` is the new attempt in every process; the failed worker's exit
code is on the job."""

from __future__ import annotations

import re
from typing import Any

import pytest
from test_realnode_jobs import assert_all_ranks

from ddp_operator.manifests import inplace_pod

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.realnode import (
    NODE,
    for_real_node,
    kubectl_ddp,
    pod_on_real_node,
    shell_job,
    trainer_job,
    wait_pod_done,
)
from jobs import ddpjob

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(600)]

# Worker 1 fails in attempt 0; worker 0 hangs there, deaf to SIGTERM (as a process stuck in a
# collective would be); attempt 1 all-reduces, each process saying its attempt.
SCRIPT = """
if [ "$DDP_ATTEMPT" = 0 ]; then
  if [ "$NODE_RANK" = 1 ]; then sleep 3; echo crash; exit 3; fi
  exec python3 -c 'import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(600)'
fi
exec torchrun --no-python sh -c \
  'echo "ATTEMPT rank=$RANK attempt=$DDP_ATTEMPT"; exec python3 examples/scripts/allreduce.py'
"""
ATTEMPT = re.compile(r"ATTEMPT rank=(\d+) attempt=(\d+)")


def _pods(cluster: Cluster, ns: str, job: str) -> list[dict[str, Any]]:
    return jobs.workers(cluster, ns, job)


def _trainer(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod["status"].get("containerStatuses") or []
    return next(s for s in statuses if s["name"] == "trainer")


def _ready(pod: dict[str, Any]) -> bool:
    """Every container ready and the pod Ready (kubectl: READY 2/2)."""
    statuses = pod["status"].get("containerStatuses") or []
    conditions = pod["status"].get("conditions") or []
    return (
        len(statuses) == 2
        and all(s["ready"] for s in statuses)
        and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    )


def _scheduled(cluster: Cluster, ns: str, pod: str) -> int:
    events = cluster.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod},reason=Scheduled"
    )
    return len(events.items)


def test_a_failed_worker_restarts_the_group_in_place_and_a_hung_one_with_it(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    job = shell_job(
        "inplace",
        namespace,
        images["trainer"],
        SCRIPT,
        procsPerNode=2,
        backoffLimit=2,
        restartStrategy="InPlace",
    )
    jobs.apply(cluster, job)
    first = wait_for(
        lambda: (
            len(ps := _pods(cluster, namespace, "inplace")) == 2
            and all(p["status"].get("podIP") for p in ps)
            and ps
        ),
        timeout=120,
        what="both workers with their IPs",
    )
    # Worker 0 hangs in attempt 0 until told to restart: a running worker reads READY 2/2.
    wait_for(
        lambda: _ready(_pods(cluster, namespace, "inplace")[0]),
        timeout=30,
        what="worker 0 READY 2/2 while its trainer runs",
    )
    done = jobs.wait_phase(cluster, namespace, "inplace", "Succeeded", timeout=300)
    assert done["status"]["restarts"] == 1, done["status"]
    after = _pods(cluster, namespace, "inplace")
    same = [(p["metadata"]["uid"], p["status"]["podIP"], p["spec"]["nodeName"]) for p in first]
    assert [
        (p["metadata"]["uid"], p["status"]["podIP"], p["spec"]["nodeName"]) for p in after
    ] == same
    assert [_trainer(p)["restartCount"] for p in after] == [1, 1], after
    assert [p["metadata"]["annotations"]["ddp-operator.io/attempt"] for p in after] == ["1", "1"]
    # Each tell recorded the trainer's container then: a run of attempt 0, not the one now.
    told = [p["metadata"]["annotations"]["ddp-operator.io/container-when-told"] for p in after]
    now = [_trainer(p)["containerID"] for p in after]
    assert all(t.startswith("containerd://") and t not in now for t in told), (told, now)
    # The hung worker's attempt-0 process was ended by the kubelet.
    assert _trainer(after[0])["lastState"]["terminated"]["exitCode"] != 0
    assert [_scheduled(cluster, namespace, p["metadata"]["name"]) for p in after] == [1, 1]
    restarted = jobs.wait_event(cluster, namespace, "inplace", "RestartingInPlace")
    assert any("inplace-worker-1 exited with code 3" in e["message"] for e in restarted), restarted
    assert not [
        e for e in jobs.events(cluster, namespace, "inplace") if e["reason"] == "WorkerFailed"
    ]
    logs = kubectl_ddp(cluster, "logs", "inplace", "-n", namespace)
    assert_all_ranks(logs, 4)
    assert sorted(ATTEMPT.findall(logs)) == [(str(r), "1") for r in range(4)], logs
    # The job has finished: the operator lets the pods end (their watch exits 0).
    wait_for(
        lambda: (
            [p["status"]["phase"] for p in _pods(cluster, namespace, "inplace")]
            == ["Succeeded", "Succeeded"]
        ),
        timeout=60,
        what="both pods Succeeded",
    )


RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def test_in_place_pods_run_in_a_restricted_namespace(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """What the operator adds passes Pod Security ``restricted`` where the user's container
    does: a job there fails once, restarts in place and succeeds."""
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    cluster.core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    script = (
        'if [ "$DDP_ATTEMPT" = 0 ]; then [ "$NODE_RANK" = 1 ] && exit 3; exec sleep 600; fi; '
        'echo "ran $DDP_ATTEMPT"'
    )
    job = trainer_job(
        "strict", namespace, images["trainer"], [], backoffLimit=1, restartStrategy="InPlace"
    )
    job["spec"]["template"]["spec"]["containers"][0] |= {
        "command": ["sh", "-c", script],
        "securityContext": RESTRICTED,
    }
    jobs.apply(cluster, job)
    done = jobs.wait_phase(cluster, namespace, "strict", "Succeeded", timeout=180)
    assert done["status"]["restarts"] == 1, done["status"]
    assert jobs.wait_event(cluster, namespace, "strict", "RestartingInPlace")
    pods = _pods(cluster, namespace, "strict")
    assert [_trainer(p)["restartCount"] for p in pods] == [1, 1], pods
    logs = kubectl_ddp(cluster, "logs", "strict", "-n", namespace)
    assert logs.count("ran 1") == 2, logs


def test_without_helpers_a_trainer_image_without_a_shell_falls_back_to_recreate_saying_why(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """With the operator's helpers off (``spec.helpers``), the watch runs /bin/sh from the
    trainer's image: in one without a shell (the node's pause image stands in for a distroless
    trainer) it cannot start. The job says so, builds its workers again without it in the same
    attempt (no restart counted), and recreates the group on a failure."""
    node = cluster.core.read_node(NODE)
    pause = next(n for i in node.status.images for n in i.names if "/pause:" in n)
    spec = {"nodes": 2, "backoffLimit": 1, "helpers": {"enabled": False}}
    job = for_real_node(ddpjob("noshell", namespace, **spec), pause)
    job["spec"]["template"]["spec"]["containers"][0] |= {
        "command": ["/pause"],
        "imagePullPolicy": "Never",
    }
    jobs.apply(cluster, job)
    found = jobs.wait_condition(cluster, namespace, "noshell", "InPlaceRestart", status="False")
    cond = jobs.condition(found, "InPlaceRestart")
    assert cond["reason"] == "InPlaceWatchCannotStart", cond
    assert 'exec: "/bin/sh"' in cond["message"] and "trainer's image" in cond["message"], cond
    plain = wait_for(
        lambda: (
            len(ps := _pods(cluster, namespace, "noshell")) == 2
            and all(
                [c["name"] for c in p["spec"]["containers"]] == ["trainer"]
                and p["status"].get("phase") == "Running"
                for p in ps
            )
            and ps
        ),
        timeout=120,
        what="both workers running again without the watch",
    )
    assert jobs.get(cluster, namespace, "noshell")["status"]["restarts"] == 0
    assert jobs.wait_event(cluster, namespace, "noshell", "InPlaceWatchCannotStart")
    # A failure now goes the Recreate way: new pods, one restart counted.
    cluster.core.delete_namespaced_pod(plain[1]["metadata"]["name"], namespace)
    uids = {p["metadata"]["uid"] for p in plain}
    wait_for(
        lambda: (
            len(ps := _pods(cluster, namespace, "noshell")) == 2
            and not uids & {p["metadata"]["uid"] for p in ps}
            and all(p["status"].get("phase") == "Running" for p in ps)
        ),
        timeout=120,
        what="the group recreated",
    )
    wait_for(
        lambda: jobs.get(cluster, namespace, "noshell")["status"].get("restarts") == 1,
        what="one restart counted",
    )


def _bare_in_place_pod(name: str, image: str, script: str, release_after: int) -> dict[str, Any]:
    """An in-place pod as the operator builds it, its trainer running ``script``, with no job
    and no operator: what its watch does alone."""
    pod = pod_on_real_node(name, image, ["sh", "-c", script])
    pod["spec"]["containers"][0] |= {"name": "trainer", "imagePullPolicy": "IfNotPresent"}
    inplace_pod.make_in_place(pod, 0, 0, "alone-env", release_after)
    return pod


def test_finished_pods_end_alone_and_free_their_devices_without_the_operator(
    cluster: Cluster, namespace: str, images: dict[str, str]
) -> None:
    """With no operator to let them end, in-place pods whose trainer ended still end a little
    after (here 3 s), as their trainer did: Succeeded, Failed. One whose trainer runs keeps
    running, its watch with it."""
    cm = {"metadata": {"name": "alone-env"}, "data": {"DDP_ATTEMPT": "0"}}
    cluster.core.create_namespaced_config_map(namespace, cm)
    for name, script in (("ok", "exit 0"), ("bad", "exit 3"), ("busy", "exec sleep 600")):
        pod = _bare_in_place_pod(name, images["trainer"], script, 3)
        cluster.core.create_namespaced_pod(namespace, pod)
    assert wait_pod_done(cluster, namespace, "ok", timeout=120).status.phase == "Succeeded"
    assert wait_pod_done(cluster, namespace, "bad", timeout=120).status.phase == "Failed"
    busy = cluster.core.read_namespaced_pod("busy", namespace)
    assert busy.status.phase == "Running" and busy.spec.share_process_namespace
    assert all(s.state.running for s in busy.status.container_statuses), busy.status
