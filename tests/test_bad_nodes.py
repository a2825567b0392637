"""Bad nodes, through ``reconcile.plan`` (``bad_nodes``, ``exclusion``): a worker failing with an
uncorrectable ECC error in an in-place job moves off its node alone while the others restart in
place, its node listed on status.excludedNodes and avoided by every new pod; a ValueError moves
nothing; the bound; a worker no node can take waits; gangs recreate the group; an elastic job
replaces the worker off its node; nodes marked broken are avoided from the start. Pure."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ddp_operator.commands.jobview import render_status
from ddp_operator.decide import exclusion, reconcile
from ddp_operator.decide.conditions import condition
from ddp_operator.manifests import builders, node_avoid
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import observe

from jobs import ddpjob

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DATA = Path(__file__).parent / "data" / "hardware"
ECC = (DATA / "cuda-ecc.log").read_text().split("\n", 1)[1]
BUG = (DATA / "value-error.log").read_text().split("\n", 1)[1]


def job(**spec: Any):
    body = ddpjob("j", "ns", **{"nodes": 3, "backoffLimit": 3, **spec})
    body["metadata"]["uid"] = "job-uid"
    return resolve(body)


def worker(j, index: int, node: str, created: int = 0, told: int = 0, restarts: int = 0,
           trainer: dict | None = None, phase: str = "Running", uid: str | None = None,
           in_place: bool = True):  # fmt: skip
    """A worker pod on ``node`` as its kubelet reports it (in place: its watch runs)."""
    manifest = copy.deepcopy(builders.build_worker_pod(j, index, created, in_place=in_place))
    meta = manifest["metadata"]
    if in_place:
        meta["annotations"]["ddp-operator.io/attempt"] = str(told)
    meta["uid"] = uid or f"uid-{index}-{created}"
    manifest["spec"]["nodeName"] = node
    statuses = [{"name": "trainer", "restartCount": restarts, "state": trainer or {"running": {}}}]
    if in_place:
        statuses.append(
            {"name": "ddp-attempt-watch", "restartCount": restarts, "state": {"running": {}}}
        )
    manifest["status"] = {"phase": phase, "containerStatuses": statuses}
    return observe(manifest)


def died(message: str, code: int = 1) -> dict:
    return {"terminated": {"exitCode": code, "reason": "Error", "message": message,
                           "finishedAt": "2026-12-05T11:59:00Z"}}  # fmt: skip


def group(j, failing: str = ECC, code: int = 1) -> list:
    return [
        worker(j, 0, "gpu-0"),
        worker(j, 1, "gpu-1", trainer=died(failing, code)),
        worker(j, 2, "gpu-2"),
    ]


def test_an_ecc_error_moves_its_worker_off_its_node_and_the_others_restart_in_place():
    j = job()
    pods = group(j)
    first = reconcile.plan(j, {"restarts": 0}, pods, NOW)
    status = first.status
    assert status["restarts"] == 1 and status["inPlaceRestarts"] == 1
    (entry,) = status["excludedNodes"]
    assert entry["node"] == "gpu-1" and entry["reason"] == "HardwareError"
    assert entry["attempt"] == 0 and "uncorrectable ECC error encountered" in entry["evidence"]
    assert status["replacing"] == [{"index": 1, "uid": "uid-1-0"}]
    # Worker 1's pod alone goes; worker 0 is told first, as in any in-place restart.
    assert [p.name for p in first.delete] == ["j-worker-1"]
    assert [p.name for p in first.tell] == ["j-worker-0"] and first.create == []
    restarting = condition(status["conditions"], "Restarting")
    assert restarting["reason"] == "RestartingInPlace"
    assert (
        "worker 1 moves off node gpu-1, restarting the other 2 workers in place"
        in (restarting["message"])
    )
    excluded = condition(status["conditions"], exclusion.CONDITION)
    assert excluded["status"] == "True" and excluded["reason"] == "NodeExcluded"
    assert {e.reason for e in first.events} >= {"NodeExcluded", "RestartingInPlace"}
    (event,) = first.node_events
    assert event.node == "gpu-1" and "DDPJob ns/j" in event.message
    assert first.avoid == ["gpu-1"]

    # Its pod gone, worker 1 is created again in attempt 1, off gpu-1; no failure counted.
    told0 = worker(j, 0, "gpu-0", told=1, restarts=1)
    second = reconcile.plan(j, status, [told0, pods[2]], NOW)
    assert second.status["restarts"] == 1 and second.create == [1]
    assert second.avoid == ["gpu-1"]
    assert [p.name for p in second.tell] == ["j-worker-2"]

    # Its successor runs on gpu-2's neighbour; the group runs again, the node still kept out.
    moved = worker(j, 1, "gpu-4", created=1, told=1)
    told2 = worker(j, 2, "gpu-2", told=1, restarts=1)
    third = reconcile.plan(j, second.status, [told0, moved, told2], NOW)
    assert third.status["replacing"] == [] and third.status["phase"] == "Running"
    assert third.status["excludedNodes"] == status["excludedNodes"]
    assert third.delete == [] and third.create == [] and third.node_events == []


def test_the_new_pod_carries_the_affinity_that_keeps_it_off_the_node():
    j = job()
    plan = reconcile.plan(j, {"restarts": 0}, group(j), NOW)
    pod = builders.build_worker_pod(j, 1, plan.attempt, in_place=True)
    node_avoid.keep_off(pod, plan.avoid)
    term = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    assert term["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}
    ]


def test_a_value_error_excludes_nothing_and_moves_no_one():
    j = job()
    plan = reconcile.plan(j, {"restarts": 0}, group(j, BUG), NOW)
    assert plan.status["restarts"] == 1 and not plan.status.get("excludedNodes")
    assert plan.delete == [] and plan.node_events == [] and plan.avoid == []
    assert plan.status["replacing"] == []
    assert condition(plan.status["conditions"], exclusion.CONDITION) is None
    assert plan.status["firstFailure"].get("nodeStreak") is None


def test_a_plain_exit_twice_on_one_node_blames_nothing():
    j = job()
    first = reconcile.plan(j, {"restarts": 0}, group(j, "", 3), NOW)
    assert first.status["firstFailure"].get("nodeStreak") is None
    again = [
        worker(j, 0, "gpu-0", told=1, restarts=1),
        worker(j, 1, "gpu-1", told=1, restarts=1, trainer=died("", 3)),
        worker(j, 2, "gpu-2", told=1, restarts=1),
    ]
    second = reconcile.plan(j, first.status, again, NOW)
    assert not second.status.get("excludedNodes") and second.delete == []


def test_the_same_crash_twice_on_one_node_blames_it_the_second_time():
    j = job()
    segfault = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f"
    first = reconcile.plan(j, {"restarts": 0}, group(j, segfault, 139), NOW)
    assert not first.status.get("excludedNodes")
    assert first.status["firstFailure"]["nodeStreak"] == 1
    again = [
        worker(j, 0, "gpu-0", told=1, restarts=1),
        worker(j, 1, "gpu-1", told=1, restarts=1, trainer=died(segfault, 139)),
        worker(j, 2, "gpu-2", told=1, restarts=1),
    ]
    second = reconcile.plan(j, first.status, again, NOW)
    (entry,) = second.status["excludedNodes"]
    assert entry["reason"] == "RepeatedFailure" and entry["node"] == "gpu-1"
    assert [p.name for p in second.delete] == ["j-worker-1"]


def test_past_the_bound_the_node_is_not_kept_out_and_the_group_restarts_in_place():
    j = job(failurePolicy={"maxExcludedNodes": 1})
    listed = [{"node": "gpu-9", "reason": "HardwareError", "evidence": "x", "attempt": 0,
               "time": "2026-12-05T11:00:00Z"}]  # fmt: skip
    plan = reconcile.plan(j, {"restarts": 0, "excludedNodes": listed}, group(j), NOW)
    assert plan.status["excludedNodes"] == listed and plan.delete == []
    limit = condition(plan.status["conditions"], exclusion.CONDITION)
    assert limit["reason"] == "ExclusionLimitReached"
    assert "maxExcludedNodes is 1" in limit["message"]
    assert plan.avoid == ["gpu-9"]


def test_a_worker_no_node_can_take_waits_visibly_and_nothing_restarts():
    j = job()
    status = reconcile.plan(j, {"restarts": 0}, group(j), NOW).status
    told0 = worker(j, 0, "gpu-0", told=1, restarts=1)
    told2 = worker(j, 2, "gpu-2", told=1, restarts=1)
    waiting = worker(j, 1, "", created=1, told=1, phase="Pending", trainer={"waiting": {}})
    manifest_says = "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    waiting = waiting.__class__(
        **{**waiting.__dict__, "unschedulable": manifest_says, "node": None}
    )
    plan = reconcile.plan(j, status, [told0, waiting, told2], NOW)
    assert plan.status["restarts"] == 1 and plan.delete == [] and plan.create == []
    stuck = condition(plan.status["conditions"], exclusion.CONDITION)
    assert stuck["reason"] == "NoNodeLeft" and "j-worker-1 cannot be scheduled" in stuck["message"]
    assert "gpu-1" in stuck["message"]
    assert any(e.reason == "NoNodeLeft" for e in plan.events)
    shown = render_status(
        {"metadata": {"name": "j", "creationTimestamp": "2026-12-05T11:00:00Z"},
         "spec": {"nodes": 3}, "status": plan.status}, [], NOW,
    )  # fmt: skip
    assert "excluded nodes (1):" in shown and "gpu-1: HardwareError (attempt 0" in shown
    assert "NodesExcluded: 1 worker(s) wait for a node" in shown


def test_a_gang_recreates_the_group_and_says_why():
    j = job(gangScheduling={})
    pods = group(j)
    plan = reconcile.plan(j, {"restarts": 0}, pods, NOW)
    assert plan.status["createdInAttempt"] == 1  # recreated, every pod off gpu-1
    restarting = condition(plan.status["conditions"], "Restarting")
    assert restarting["reason"] == "WorkerFailed"
    assert (
        "not in place: worker 1 moves off node gpu-1 and its gang (Kubernetes)"
        in (restarting["message"])
    )
    assert sorted(p.name for p in plan.delete) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert plan.avoid == ["gpu-1"]


def test_an_elastic_job_replaces_the_worker_alone_off_its_node():
    j = job(minNodes=2, maxNodes=3, rdzvConf={"join_timeout": "60"})
    pods = [worker(j, i, f"gpu-{i}", in_place=False) for i in (0, 2)]
    pods.insert(1, worker(j, 1, "gpu-1", in_place=False, trainer=died(ECC), phase="Failed"))
    plan = reconcile.plan(j, {"restarts": 0}, pods, NOW)
    assert plan.status["restarts"] == 0 and plan.status["replacements"] == 1
    assert plan.status["excludedNodes"][0]["node"] == "gpu-1"
    replaced = next(e for e in plan.events if e.reason == "WorkerReplaced")
    assert "worker 1 moves off node gpu-1" in replaced.message
    assert plan.avoid == ["gpu-1"]


def test_nodes_marked_broken_are_avoided_by_a_new_job():
    j = job()
    plan = reconcile.plan(j, {}, [], NOW, broken={"gpu-5": "condition SysLogsXIDError=True"})
    assert plan.create == [0, 1, 2] and plan.avoid == ["gpu-5"]


def test_a_failure_on_a_node_marked_broken_blames_it():
    j = job()
    crash = "Fatal Python error: Aborted"
    plan = reconcile.plan(
        j, {"restarts": 0}, group(j, crash), NOW, broken={"gpu-1": "condition GpuMemWatch=True"}
    )
    (entry,) = plan.status["excludedNodes"]
    assert entry["reason"] == "NodeMarkedBroken" and entry["evidence"].startswith("node gpu-1:")


def test_worker_0_blamed_moves_too_and_no_one_waits_for_its_old_trainer():
    j = job()
    pods = [
        worker(j, 0, "gpu-0", trainer=died(ECC)),
        worker(j, 1, "gpu-1"),
        worker(j, 2, "gpu-2"),
    ]
    plan = reconcile.plan(j, {"restarts": 0}, pods, NOW)
    assert plan.status["excludedNodes"][0]["node"] == "gpu-0"
    assert [p.name for p in plan.delete] == ["j-worker-0"]
    assert sorted(p.name for p in plan.tell) == ["j-worker-1", "j-worker-2"]
    # Its successor keeps the name, hence the DNS name the others rendezvous at.
    later = reconcile.plan(j, plan.status, pods[1:], NOW)
    assert later.create == [0] and later.avoid == ["gpu-0"]
    assert builders.worker_name(j, 0) == "j-worker-0"
