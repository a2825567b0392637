"""The rank that hung, named from where each rank stood (``culprit``): the one outside torch
while the others wait in a collective; nobody when no rank waits, when the stacks predate the
last advance, or when ranks of two workers stand outside. A stall names it (``hangs``). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ddp_operator.decide import culprit, hangs, quiet
from ddp_operator.decide.reconcile import plan
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
WAITS = [
    "tmp/t.py:10 <module>",
    "torch/distributed/c10d_logger.py:81 wrapper",
    "torch/distributed/distributed_c10d.py:2950 all_reduce",
]
SLEEPS = ["tmp/t.py:9 <module>"]


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def stack(
    rank: int, frames: list[str], ago: float = 10, procs: int = 1, **more: Any
) -> dict[str, Any]:
    worker = rank // procs
    kept = culprit.normalize(
        {"rank": rank, "frames": frames, **more}, worker, 64, f"j-worker-{worker}", NOW
    )
    return {**kept, "at": at(ago)}


def pg(entered: int, completed: int, op: str = "all_reduce", group: str = "default_pg") -> dict:
    return {"group": group, "entered": entered, "completed": completed, "op": op}


def test_the_rank_outside_torch_while_the_others_wait_is_named() -> None:
    found = culprit.named({0: stack(0, WAITS), 1: stack(1, SLEEPS)}, NOW - timedelta(seconds=30))
    assert found == culprit.Culprit(
        1,
        "j-worker-1",
        1,
        "j-worker-1 (rank 1) never joined the collective: it stood at tmp/t.py:9 in <module>; "
        "rank 0 waits in all_reduce at tmp/t.py:10",
    )
    # Ranks of one pod (torchrun's): the pod is named, with the first such rank.
    four = {r: stack(r, SLEEPS if r in (2, 3) else WAITS, procs=2) for r in range(4)}
    found = culprit.named(four, None)
    assert found is not None and (found.index, found.rank) == (1, 2)
    assert "ranks 0, 1 wait in all_reduce" in found.words


def test_the_collective_the_hung_rank_never_joined_is_named_from_the_flight_recorder() -> None:
    """Rank 0 entered all_reduce #31 of default_pg and waits; rank 1 entered #30 at most."""
    waiting = stack(0, WAITS, collectives=[pg(31, 30), pg(4, 4, "broadcast", "sub")])
    hung = stack(1, SLEEPS, collectives=[pg(30, 30), pg(4, 4, "broadcast", "sub")])
    found = culprit.named({0: waiting, 1: hung}, None)
    assert found is not None and found.words == (
        "j-worker-1 (rank 1) never joined all_reduce #31 (default_pg): it stood at tmp/t.py:9 "
        "in <module>; rank 0 waits there at tmp/t.py:10"
    )
    # Recorders that do not say (off in one rank, or no collective in flight): as before.
    for a, b in (([pg(31, 30)], []), ([pg(30, 30)], [pg(30, 30)]), ([pg(31, 30)], [pg(31, 31)])):
        found = culprit.named(
            {0: stack(0, WAITS, collectives=a), 1: stack(1, SLEEPS, collectives=b)}, None
        )
        assert found is not None and "never joined the collective" in found.words, (a, b)


def test_a_rank_behind_the_others_stands_outside_though_its_recorder_lags() -> None:
    """Rank 1 sleeps in the script, its recorder's last all_reduce (#30) not yet marked
    completed (torch 2.15's gloo marked one late, or never); rank 0 waits in #31: rank 1 never
    joined it. A rank at the script's own line in the collective the others are in still waits
    (NCCL: ``.item()`` waiting on the GPU)."""
    waiting = stack(0, WAITS, collectives=[pg(31, 30)])
    lagging = stack(1, SLEEPS, collectives=[pg(30, 29)])
    found = culprit.named({0: waiting, 1: lagging}, None)
    assert found is not None and found.rank == 1, found
    assert "never joined all_reduce #31 (default_pg)" in found.words, found.words
    on_gpu = stack(2, SLEEPS, collectives=[pg(31, 30)])
    found = culprit.named({0: waiting, 1: lagging, 2: on_gpu}, None)
    assert found is not None and found.rank == 1 and "ranks 0, 2 wait" in found.words, found


def test_a_stack_s_collectives_are_checked_and_bounded() -> None:
    kept = stack(0, WAITS, collectives=[pg(1, 0, "x" * 500, "g" * 500)] * 20)["collectives"]
    assert len(kept) == culprit.MAX_GROUPS and len(kept[0]["op"]) == len(kept[0]["group"]) == 64
    for bad in (
        "no",
        [1],
        [{"group": 1, "entered": 1, "completed": 0}],
        [{"group": "g", "entered": True, "completed": 0}],
        [{"group": "g", "entered": 1, "completed": -2}],
    ):
        with pytest.raises(culprit.BadStack):
            stack(0, WAITS, collectives=bad)


def test_a_rank_stuck_in_its_data_loader_stands_outside_the_collective() -> None:
    loader = ["tmp/t.py:20 <module>", "torch/utils/data/dataloader.py:733 __next__"]
    found = culprit.named({0: stack(0, WAITS), 1: stack(1, loader)}, None)
    assert found is not None and found.rank == 1


@pytest.mark.parametrize(
    ("stacks", "why"),
    [
        ({0: stack(0, WAITS), 1: stack(1, WAITS)}, "every rank waits: the culprit is silent"),
        ({0: stack(0, SLEEPS), 1: stack(1, SLEEPS)}, "no rank waits"),
        ({0: stack(0, WAITS)}, "only waiting ranks spoke"),
        (
            {
                0: stack(0, WAITS),
                1: stack(1, ["tmp/t.py:3 <module>", "python3.11/threading.py:1 join"]),
            },
            "rank 1's main thread only waits for the thread that trains",
        ),
        ({0: stack(0, WAITS), 1: stack(1, SLEEPS, ago=40)}, "sent before the last advance"),
    ],
)
def test_nobody_is_named_without_one_worker_outside_and_one_rank_waiting(
    stacks: dict[int, dict[str, Any]], why: str
) -> None:
    assert culprit.named(stacks, NOW - timedelta(seconds=30)) is None, why


def test_a_stack_is_taken_only_for_a_rank_of_the_world_and_bounded() -> None:
    with pytest.raises(culprit.BadStack, match="rank 4 is not in the job's world of 4 ranks"):
        culprit.normalize({"rank": 4, "frames": []}, 0, 4, "j-worker-0", NOW)
    for raw in ({"rank": "0", "frames": []}, {"rank": 0, "frames": [1]}, ["rank"]):
        with pytest.raises(culprit.BadStack):
            culprit.normalize(raw, 0, 1, "j-worker-0", NOW)
    kept = culprit.normalize({"rank": 0, "frames": ["x" * 999] * 40}, 0, 1, "p", NOW)
    assert len(kept["frames"]) == culprit.MAX_FRAMES
    assert {len(f) for f in kept["frames"]} == {culprit.MAX_FRAME_CHARS}


def test_a_stall_names_the_worker_that_hung_and_its_failure_says_which() -> None:
    body = ddpjob("j", "ns", nodes=2, stallDetection={"timeoutSeconds": 30})
    body["metadata"]["uid"] = "u"
    job = resolve(body)
    conds = [{"type": "Running", "status": "True", "lastTransitionTime": at(600)}]
    progress = {"step": 5, "attempt": 0, "advanced": at(40), "updated": at(40)}
    stacks = {0: stack(0, WAITS), 1: stack(1, SLEEPS)}
    stall, _ = hangs.check(job, {"conditions": conds}, progress, 0, NOW, stacks)
    assert stall is not None and (stall.index, stall.pod) == (1, "j-worker-1")
    assert stall.message.startswith("j-worker-1 (rank 1) never joined the collective: ")
    assert "; the training's step has not advanced from 5 since" in stall.message
    pods = [WorkerPod(f"j-worker-{i}", i, 0, "Running", uid=f"p{i}", owner_uid="u") for i in (0, 1)]
    p = plan(
        job, {"restarts": 0, "conditions": conds}, pods, NOW, 1, progress=progress, stacks=stacks
    )
    first = p.status["firstFailure"]
    assert (first["worker"], first["pod"], first["reason"]) == (1, "j-worker-1", "Stalled")
    restarting = next(c for c in p.status["conditions"] if c["type"] == "Restarting")
    assert restarting["message"].startswith("j-worker-1 (rank 1) never joined the collective")
    assert p.status["restarts"] == 1


def test_an_elastic_job_replaces_the_worker_that_hung_alone() -> None:
    """Issue 54: the stall is that worker's failure, so an elastic job replaces it alone (its
    agents re-rendezvous without it), as it would a crash of it; the others run on."""
    body = ddpjob("j", "ns", nodes=3, procsPerNode=2, minNodes=2, maxNodes=3)
    body["spec"]["stallDetection"] = {"timeoutSeconds": 30}
    body["metadata"]["uid"] = "u"
    job = resolve(body)
    conds = [{"type": "Running", "status": "True", "lastTransitionTime": at(600)}]
    progress = {"step": 5, "attempt": 0, "advanced": at(40), "updated": at(40)}
    stacks = {r: stack(r, SLEEPS if r in (2, 3) else WAITS, procs=2) for r in range(6)}
    pods = [
        WorkerPod(f"j-worker-{i}", i, 0, "Running", uid=f"p{i}", owner_uid="u", node=f"n{i}")
        for i in range(3)
    ]
    status = {"restarts": 0, "conditions": conds}
    p = plan(job, status, pods, NOW, generation=1, progress=progress, stacks=stacks)
    assert p.status["restarts"] == 0 and p.status["replacing"] == [{"index": 1, "uid": "p1"}]
    first = p.status["firstFailure"]
    assert (first["worker"], first["node"], first["action"]) == (1, "n1", "ReplaceWorker")
    assert [x.name for x in p.delete] == ["j-worker-1"]


def torchrun_ranks(workers: int, procs: int, absent: tuple[int, ...] = ()) -> dict[int, list[int]]:
    """The global ranks torchrun's c10d rendezvous gives each worker's processes: nodes numbered
    in the sorted order of their descriptors (host name first), the workers of the round only."""
    hosts = sorted((f"j-worker-{i}", i) for i in range(workers) if i not in absent)
    return {i: [n * procs + p for p in range(procs)] for n, (_, i) in enumerate(hosts)}


def test_an_elastic_hang_of_12_workers_names_the_pod_that_sent_the_stack() -> None:
    """Issue 68: a stack was refused unless its rank divided by the pod's processes gave the
    pod's index; torchrun numbers j-worker-10 node 2 (ranks 4 and 5) and j-worker-2 node 4, so
    20 of 24 stacks were refused and a hang with every other rank in one all_reduce was never
    named. Each stack is taken from the pod that runs its rank, and that pod is named."""
    ranks = torchrun_ranks(12, 2)
    assert ranks[10] == [4, 5] and ranks[2] == [8, 9]
    stacks: dict[int, dict[str, Any]] = {}
    for worker, mine in ranks.items():
        for rank in mine:
            frames = SLEEPS if worker == 10 else WAITS
            raw = {"rank": rank, "frames": frames, "collectives": [pg(31 - (worker == 10), 30)]}
            kept = culprit.normalize(raw, worker, 24, f"j-worker-{worker}", NOW)
            culprit.keep(stacks, {**kept, "at": at(10)}, 2)
    assert sorted(stacks) == list(range(24))
    found = culprit.named(stacks, NOW - timedelta(seconds=30))
    assert found is not None and (found.index, found.pod, found.rank) == (10, "j-worker-10", 4)
    assert found.words.startswith("j-worker-10 (rank 4) never joined all_reduce #31 (default_pg)")
    # The quiet check counts each worker's ranks by the pod that sent them: all 12 stand still.
    body = ddpjob("j", "ns", nodes=12, procsPerNode=2, stallDetection={"timeoutSeconds": 30})
    conds = [{"type": "Running", "status": "True", "lastTransitionTime": at(600)}]
    current = {i: WorkerPod(f"j-worker-{i}", i, 0, "Running") for i in range(12)}
    stall, _ = quiet.check(resolve(body), {"conditions": conds}, current, NOW, stacks)
    assert stall is None  # quiet for 10 s only: not yet, but not for want of stacks
    old = {r: {**s, "at": at(5), "quietSeconds": 40} for r, s in stacks.items()}
    stall, _ = quiet.check(resolve(body), {"conditions": conds}, current, NOW, old)
    assert stall is not None and (stall.index, stall.pod) == (10, "j-worker-10")


def test_a_round_without_a_worker_moves_the_ranks_and_each_pod_keeps_its_latest() -> None:
    """Worker 1 of 3 (one process each) lost: the round of 2 gives j-worker-2 rank 1. Its
    stack of rank 1 replaces j-worker-1's, its own of rank 2 goes (one process: one rank), and
    the worker named is the pod that sent the stack."""
    stacks: dict[int, dict[str, Any]] = {}

    def said(worker: int, rank: int, frames: list[str], ago: float) -> None:
        kept = culprit.normalize(
            {"rank": rank, "frames": frames}, worker, 3, f"j-worker-{worker}", NOW
        )
        culprit.keep(stacks, {**kept, "at": at(ago)}, 1)

    before, after = torchrun_ranks(3, 1), torchrun_ranks(3, 1, absent=(1,))
    assert before == {0: [0], 1: [1], 2: [2]} and after == {0: [0], 2: [1]}
    for worker, (rank,) in before.items():
        said(worker, rank, WAITS, 50)
    for worker, (rank,) in after.items():
        said(worker, rank, SLEEPS if worker == 2 else WAITS, 10)
    assert {r: s["pod"] for r, s in stacks.items()} == {0: "j-worker-0", 1: "j-worker-2"}
    found = culprit.named(stacks, NOW - timedelta(seconds=30))
    assert found is not None and (found.index, found.pod, found.rank) == (2, "j-worker-2", 1)
    # A pod keeps at most its processes' worth of ranks, its latest.
    for rank, ago in ((0, 9), (2, 8)):
        said(2, rank, SLEEPS, ago)
    assert {r: s["pod"] for r, s in stacks.items()} == {2: "j-worker-2"}
