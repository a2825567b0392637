"""Elastic jobs, decided (``elastic`` and ``reconcile.plan`` with it): a lost worker other than 0
is replaced alone and counted once, worker 0's loss restarts the group, ``spec.nodes`` changes
create or remove the highest workers, and the status carries the live world size. Pure."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from ddp_operator.decide.reconcile import plan
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob, env_of

NOW = datetime(2026, 11, 24, tzinfo=UTC)
own = functools.partial(WorkerPod, owner_uid="u")


def job(nodes: int = 3, **spec):
    bounds = {"minNodes": 2, "maxNodes": 3, **spec}
    body = ddpjob("j", "ns", nodes=nodes, procsPerNode=2, **bounds)
    body["metadata"]["uid"] = "u"
    return resolve(body)


def pods(n: int, phase: str = "Running", **kw) -> list[WorkerPod]:
    return [own(f"j-worker-{i}", i, 0, phase, uid=f"p{i}", **kw) for i in range(n)]


def advance(j, status: dict, observed: list[WorkerPod], seen=()):
    p = plan(j, status, observed, NOW, generation=1, seen=seen)
    return p, {**status, **p.status}


def cond(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_a_deleted_worker_is_replaced_alone_and_counted_once() -> None:
    j = job()
    _, st = advance(j, {}, pods(3))
    assert st["worldSize"] == 6 and cond(st, "Running")["reason"] == "AllWorkersRunning"
    going = own("j-worker-2", 2, 0, "Running", uid="p2", deleting=True)
    p, st = advance(j, st, [*pods(2), going])
    assert st["restarts"] == 0 and st["replacements"] == 1
    assert st["replacing"] == [{"index": 2, "uid": "p2"}]
    assert p.delete == [] and p.create == []  # going already; its name is still taken
    assert [e.reason for e in p.events] == ["WorkerReplaced", "EnoughWorkersRunning"]
    assert "j-worker-2 is being deleted" in p.events[0].message
    # The group runs on at world 4 (worker 0 and minNodes workers): still Running.
    assert st["phase"] == "Running" and st["worldSize"] == 4
    assert cond(st, "Running")["reason"] == "EnoughWorkersRunning"
    # The same pod seen again, then gone: no second replacement; then created again.
    p, st = advance(j, st, [*pods(2), going])
    assert st["replacements"] == 1 and p.events == []
    p, st = advance(j, st, pods(2), seen={("j-worker-2", 0)})
    assert st["replacements"] == 1 and p.create == [2] and st["restarts"] == 0
    # Its successor seen: the replacement is over; the group is whole again.
    successor = own("j-worker-2", 2, 0, "Running", uid="q2")
    p, st = advance(j, st, [*pods(2), successor], seen={("j-worker-2", 0)})
    assert st["replacing"] == [] and st["replacements"] == 1 and st["worldSize"] == 6
    # The successor lost too: a second replacement.
    p, st = advance(j, st, pods(2), seen={("j-worker-2", 0)})
    assert st["replacements"] == 2 and st["replacing"] == [{"index": 2, "uid": ""}]


def test_a_failed_worker_is_deleted_and_replaced_other_workers_keep_running() -> None:
    j = job()
    _, st = advance(j, {}, pods(3))
    failed = own("j-worker-1", 1, 0, "Failed", uid="p1", exit_code=1)
    p, st = advance(j, st, [pods(3)[0], failed, pods(3)[2]])
    assert [x.name for x in p.delete] == ["j-worker-1"] and st["replacements"] == 1
    assert st["restarts"] == 0 and "exit" in p.events[0].message


def test_worker_0s_loss_restarts_the_group() -> None:
    j = job()
    _, st = advance(j, {}, pods(3))
    failed = own("j-worker-0", 0, 0, "Failed", uid="p0", exit_code=1)
    _p, st = advance(j, st, [failed, *pods(3)[1:]])
    assert st["restarts"] == 1 and st.get("replacements") == 0 and st["replacing"] == []


def test_not_elastic_without_room_or_under_a_gang() -> None:
    for j in (
        job(nodes=2, maxNodes=2),
        job(nodes=2, minNodes=None, maxNodes=None),
        job(gangScheduling={"scheduler": "Kubernetes"}),
    ):
        assert not j.scalable
        _, st = advance(j, {}, pods(j.nodes))
        failed = own(f"j-worker-{j.nodes - 1}", j.nodes - 1, 0, "Failed", uid="x", exit_code=1)
        _, st = advance(j, st, [*pods(j.nodes - 1), failed])
        assert st["restarts"] == 1 and st["replacements"] == 0


def test_scaling_up_creates_the_new_workers_and_down_removes_the_highest() -> None:
    _, st = advance(job(nodes=2), {}, pods(2))
    p, st = advance(job(nodes=3), st, pods(2))
    assert p.create == [2] and st["restarts"] == 0 and st["phase"] == "Running"
    p, st = advance(job(nodes=3), st, pods(3))
    assert st["worldSize"] == 6
    p, st = advance(job(nodes=2), st, pods(3))
    assert [x.name for x in p.delete] == ["j-worker-2"] and p.create == []
    assert st["restarts"] == 0 and st["replacements"] == 0 and st["phase"] == "Running"
    # A removed worker's pod still going keeps no new one from being created meanwhile.
    going = own("j-worker-2", 2, 0, "Running", uid="p2", deleting=True)
    p, st = advance(job(nodes=2), st, [pods(2)[0], going], seen={("j-worker-1", 0)})
    assert st["replacements"] == 1 and p.create == [1]


def test_a_lost_agent_is_dropped_within_seconds_unless_the_job_says_or_is_large() -> None:
    """A heartbeat a second (the lost agent blocks the next round until its heartbeats are
    missed); the job's own keep_alive_interval wins; above 64 nodes torch's default stays."""

    def conf(**spec: Any) -> str:
        return env_of(builders.build_worker_pod(job(**spec), 1), job(**spec))["PET_RDZV_CONF"]

    assert conf() == "is_host=0,keep_alive_interval=1"
    assert conf(rdzvConf={"keep_alive_interval": "3"}) == "is_host=0,keep_alive_interval=3"
    assert conf(maxNodes=65) == "is_host=0"


def test_elastic_env_lets_torchrun_restart_and_rendezvous_again() -> None:
    j = job(rdzvConf={"last_call_timeout": "5"})
    env = env_of(builders.build_worker_pod(j, 1), j)
    assert env["PET_NNODES"] == "2:3"
    assert env["PET_RDZV_CONF"] == "is_host=0,keep_alive_interval=1,last_call_timeout=5"
    assert env["PET_MAX_RESTARTS"] == "3" and env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "t",
                    "env": [{"name": "PET_MAX_RESTARTS", "value": "9"}],
                }
            ]
        }
    }
    mine = resolve({**ddpjob("j", "ns", nodes=3, minNodes=2, maxNodes=3, template=template)})
    assert env_of(builders.build_worker_pod(mine, 0), mine)["PET_MAX_RESTARTS"] == "9"
    fixed = resolve(ddpjob("j", "ns", nodes=2))
    assert "PET_MAX_RESTARTS" not in env_of(builders.build_worker_pod(fixed, 0), fixed)


def test_a_worker_failing_every_time_is_replaced_up_to_max_replacements() -> None:
    """Worker 2 fails again after each replacement: replaced alone twice (maxReplacements 2),
    then the group decision (backoffLimit 0: the job fails, saying why)."""
    j = job(maxNodes=4, failurePolicy={"maxReplacements": 2}, backoffLimit=0)
    _, st = advance(j, {}, pods(3))
    for n, uid in enumerate(("p2", "q2", "r2"), start=1):
        others = pods(2)
        failed = own("j-worker-2", 2, 0, "Failed", uid=uid, exit_code=1, reason="Error")
        p, st = advance(j, st, [*others, failed])
        if n <= 2:
            assert st["replacements"] == n and st["phase"] == "Running", st
            assert st["firstFailure"]["action"] == "ReplaceWorker"
            p, st = advance(j, st, others, seen={("j-worker-2", 0)})  # gone: created again
            assert p.create == [2]
            successor = own("j-worker-2", 2, 0, "Running", uid=f"s{n}")
            _, st = advance(j, st, [*others, successor], seen={("j-worker-2", 0)})
    assert st["phase"] == "Failed" and st["replacements"] == 2, st
    failed = cond(st, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].startswith("j-worker-2 exited with code 1 (Error)")
    assert failed["message"].endswith(
        "the group was restarted 0 times (backoffLimit 0); not alone: maxReplacements (2) reached"
    ), failed
    assert st["firstFailure"]["action"] == "FailJob"
