"""The progress desk's writes, with a stand-in for the API server that counts them: 60 reports
of the last step in 2 s make 2 status writes at most (the cluster test counts them with the
operator's request metric: test_progress_flood)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from ddp_operator.act import progress_desk
from ddp_operator.act.progress_desk import ProgressDesk
from ddp_operator.act.runner import JobRunner
from ddp_operator.api.progress_server import Sender
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

KEY = ("ns", "j")
SENDER = Sender("ns", "j-worker-0", "pod-uid")


class Writes:
    """Takes status patches, keeping them (what the API server would be asked)."""

    def __init__(self) -> None:
        self.patches: list[Mapping[str, Any]] = []

    async def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], verb: str = "patch_status"
    ) -> str:
        self.patches.append(status)
        return str(len(self.patches))  # the job's new resourceVersion


class Loop:
    """What the desk reads of a job's loop: its body and status (and, written, its version)."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {"metadata": {"uid": "job-uid"}, "status": {}}
        self.status: dict[str, Any] = {"restarts": 0}
        self.version: str | None = "0"
        self.reported: dict[str, Any] | None = None
        self.marked: dict[str, Any] | None = None
        self.poked = 0

    def poke(self) -> None:
        self.poked += 1


class Jobs:
    """What the desk reads of the registry: the job's loop and pods."""

    def __init__(self) -> None:
        self.loop = Loop()
        pod = WorkerPod("j-worker-0", 0, 0, uid="pod-uid", owner_uid="job-uid")
        self.index = type("Index", (), {"get": staticmethod(lambda key: [pod])})()

    def job(self, key: Any) -> Loop:
        return self.loop

    def paused(self) -> bool:
        return self.standby

    standby = False  # a paused standby (``act/standby.py``)


def test_a_flood_of_complete_reports_makes_two_writes_at_most(monkeypatch) -> None:
    monkeypatch.setattr(progress_desk, "WRITE_EVERY", 1.0)
    writes, jobs = Writes(), Jobs()
    desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]

    async def flood() -> list[int]:
        codes = [(await desk.accept(*KEY, SENDER, {"step": 5, "total": 10}))[0]]
        for i in range(60):
            report = {"step": 10 + i % 3, "total": 10, "metrics": {"loss": i}}
            codes.append((await desk.accept(*KEY, SENDER, report))[0])
            await asyncio.sleep(0.005)
        await asyncio.sleep(1.3)  # the held-back latest is written once the interval is over
        return codes

    codes = asyncio.run(flood())
    assert set(codes) == {202}
    steps = [p["progress"]["step"] for p in writes.patches]
    assert steps == [5, 10, 10], steps  # the first, the first complete one at once, the latest
    assert writes.patches[-1]["progress"]["metrics"]["loss"] == 59.0
    # The loop's next status write is conditional on the version the desk's write made.
    assert jobs.loop.version == "3"
    desk.forget(KEY)


def test_a_paused_standby_sends_reports_away() -> None:
    jobs = Jobs()
    jobs.standby = True
    desk = ProgressDesk(Writes(), jobs)  # type: ignore[arg-type]
    code, why = asyncio.run(desk.accept(*KEY, SENDER, {"step": 1}))
    assert code == 503 and "another replica is active" in why


def test_a_stale_pod_or_attempt_is_refused_and_cannot_reset_the_clock() -> None:
    """Issue 54: a report was taken from any attempt's pod with the attempt it declared."""
    writes, jobs = Writes(), Jobs()
    desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]
    jobs.loop.status["restarts"] = 1
    answer = asyncio.run(desk.accept(*KEY, SENDER, {"step": 3}))
    assert answer == (403, "pod j-worker-0 runs an earlier attempt than ddpjob ns/j's 1")
    pod = WorkerPod("j-worker-0", 0, 1, uid="pod-uid", owner_uid="job-uid")
    jobs.index = type("Index", (), {"get": staticmethod(lambda key: [pod])})()
    answer = asyncio.run(desk.accept(*KEY, SENDER, {"step": 3, "attempt": 0}))
    assert answer == (409, "a report of attempt 0: the job is at 1")
    assert asyncio.run(desk.accept(*KEY, SENDER, {"step": 3, "attempt": 1}))[0] == 202
    # Told attempt 2 in place, its old processes still running: not yet of attempt 2.
    told = WorkerPod("j-worker-0", 0, 1, uid="pod-uid", owner_uid="job-uid", in_place=True)
    told = dataclasses.replace(told, told=2, restart_pending=True)
    jobs.index = type("Index", (), {"get": staticmethod(lambda key: [told])})()
    jobs.loop.status["restarts"] = 2
    assert asyncio.run(desk.accept(*KEY, SENDER, {"step": 4, "attempt": 1}))[0] == 403
    desk.forget(KEY)


def test_a_new_checkpoint_is_written_within_a_second_and_a_repeated_one_not_again() -> None:
    """A report that says a new checkpoint goes ahead of the 5 s interval (a failure may come
    right after a save); the same checkpoint in every later report writes nothing more."""

    async def scenario() -> None:
        writes, jobs = Writes(), Jobs()
        desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]
        mark = {"step": 10, "path": "/ckpt/10"}
        assert (await desk.accept(*KEY, SENDER, {"step": 10, "attempt": 0}))[0] == 202
        assert len(writes.patches) == 1  # the attempt's first report: written at once
        await desk.accept(*KEY, SENDER, {"step": 10, "attempt": 0, "checkpoint": mark})
        assert jobs.loop.marked is not None and jobs.loop.marked["step"] == 10  # before the write
        await asyncio.sleep(progress_desk.checkpoints.CHECKPOINT_GAP + 0.3)
        assert len(writes.patches) == 2
        written = writes.patches[1]["checkpoint"]
        assert written | {"time": "t"} == {
            "step": 10,
            "path": "/ckpt/10",
            "attempt": 0,
            "time": "t",
        }
        for step in (11, 12):
            await desk.accept(*KEY, SENDER, {"step": step, "attempt": 0, "checkpoint": mark})
        await asyncio.sleep(progress_desk.checkpoints.CHECKPOINT_GAP + 0.3)
        assert len(writes.patches) == 2  # the same checkpoint: the interval as any report
        assert jobs.loop.reported is not None and jobs.loop.reported["step"] == 12  # unwritten
        assert (
            progress_desk.progress_report.latest(writes.patches[-1]["progress"], jobs.loop.reported)
            == jobs.loop.reported
        )
        assert progress_desk.progress_report.latest(None, None) is None
        bad = {"step": 12, "checkpoint": {"step": "ten"}}
        answer = await desk.accept(*KEY, SENDER, bad)
        assert answer[0] == 400 and "checkpoint.step must be an integer" in answer[1]
        desk.forget(KEY)

    asyncio.run(scenario())


def test_a_kubeflow_status_update_is_taken_as_a_report() -> None:
    """What Hugging Face's KubeflowCallback posts lands on status.progress as a report would."""

    async def scenario() -> None:
        writes, jobs = Writes(), Jobs()
        desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]
        start = {
            "trainerStatus": {
                "progressPercentage": 0,
                "metrics": [{"name": "total_steps", "value": "60"}],
            }
        }
        assert (await desk.accept(*KEY, SENDER, start, kubeflow=True))[0] == 202
        written = writes.patches[0]["progress"]
        assert (written["step"], written["total"], written["attempt"]) == (0, 60, 0), written
        assert await desk.accept(*KEY, SENDER, {}, kubeflow=True) == (
            200,
            "nothing to take (no trainerStatus)",
        )
        bad = {"trainerStatus": {"progressPercentage": 300}}
        code, why = await desk.accept(*KEY, SENDER, bad, kubeflow=True)
        assert code == 400 and "progressPercentage must be 0 to 100" in why
        desk.forget(KEY)

    asyncio.run(scenario())


def test_where_a_quiet_rank_stands_is_kept_for_its_attempt_and_never_written() -> None:
    """``{"stack": ...}`` (``progress_stacks``): taken from the job's own pod of the current
    attempt for its own ranks, kept in the job loop's memory for the stall check (``culprit``),
    not written to the status, the loop woken once every rank has said; a new attempt starts
    afresh."""
    writes, jobs = Writes(), Jobs()
    jobs.loop.body = {**ddpjob("j", "ns", nodes=2), "status": {}}
    jobs.loop.body["metadata"]["uid"] = "job-uid"
    jobs.loop.stacks, jobs.loop.stacks_attempt = {}, -1  # type: ignore[attr-defined]
    desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]
    frames = ["tmp/t.py:10 <module>", "torch/distributed/distributed_c10d.py:2950 all_reduce"]
    said = {"stack": {"rank": 0, "frames": frames, "quietSeconds": 16}, "attempt": 0}
    assert asyncio.run(desk.accept(*KEY, SENDER, said)) == (202, "taken")
    kept = jobs.loop.stacks[0]  # type: ignore[attr-defined]
    assert (kept["worker"], kept["pod"], kept["frames"]) == (0, "j-worker-0", frames)
    assert kept["quietSeconds"] == 16 and writes.patches == []
    assert jobs.loop.poked == 0  # rank 1 has not said: the loop is not woken
    jobs.loop.body["spec"]["nodes"] = 1
    assert asyncio.run(desk.accept(*KEY, SENDER, said)) == (202, "taken")
    assert jobs.loop.poked == 1  # every rank has: it looks
    # A world of one rank has no rank 1; a stack of an earlier attempt is refused.
    code, why = asyncio.run(desk.accept(*KEY, SENDER, {"stack": {"rank": 1, "frames": []}}))
    assert code == 400 and "rank 1 is not in the job's world of 1 ranks" in why
    stale = {**said, "attempt": 1}
    assert asyncio.run(desk.accept(*KEY, SENDER, stale))[0] == 409
    desk.forget(KEY)


def test_every_rank_of_12_workers_is_taken_from_the_pod_torchrun_gave_it() -> None:
    """Issue 68: with 12 workers x 2 processes torchrun numbers the nodes in the sorted order of
    their host names (j-worker-10 is node 2: ranks 4 and 5), and 20 of the 24 stacks were
    refused (400). Each is taken from its pod, kept with that pod's index, and once all 24 have
    said the loop looks; a pod keeps no more ranks than its processes."""
    writes, jobs = Writes(), Jobs()
    jobs.loop.body = {**ddpjob("j", "ns", nodes=12, procsPerNode=2), "status": {}}
    jobs.loop.body["metadata"]["uid"] = "job-uid"
    jobs.loop.stacks, jobs.loop.stacks_attempt = {}, -1  # type: ignore[attr-defined]
    pods = [WorkerPod(f"j-worker-{i}", i, 0, uid=f"u{i}", owner_uid="job-uid") for i in range(12)]
    jobs.index = type("Index", (), {"get": staticmethod(lambda key: pods)})()
    desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]
    hosts = sorted(p.name for p in pods)  # c10d's node ranks
    frames = ["tmp/t.py:10 <module>", "torch/distributed/distributed_c10d.py:2950 all_reduce"]
    for node, name in enumerate(hosts):
        sender = Sender("ns", name, f"u{int(name.rsplit('-', 1)[1])}")
        for rank in (2 * node, 2 * node + 1):
            said = {"stack": {"rank": rank, "frames": frames}, "attempt": 0}
            assert asyncio.run(desk.accept(*KEY, sender, said)) == (202, "taken"), (name, rank)
    stacks = jobs.loop.stacks  # type: ignore[attr-defined]
    assert sorted(stacks) == list(range(24)) and jobs.loop.poked == 1
    assert (stacks[4]["worker"], stacks[5]["pod"]) == (10, "j-worker-10")
    assert (stacks[8]["worker"], stacks[9]["pod"]) == (2, "j-worker-2")
    # Past the world, refused; a third rank from a pod of two processes pushes out its oldest.
    sender = Sender("ns", "j-worker-0", "u0")
    code, why = asyncio.run(desk.accept(*KEY, sender, {"stack": {"rank": 24, "frames": []}}))
    assert code == 400 and "rank 24 is not in the job's world of 24 ranks" in why
    assert (
        asyncio.run(desk.accept(*KEY, sender, {"stack": {"rank": 23, "frames": frames}}))[0] == 202
    )
    assert sorted(r for r, s in stacks.items() if s["pod"] == "j-worker-0") == [1, 23]
    desk.forget(KEY)


def test_a_pod_told_a_later_attempt_reports_for_it_while_the_status_says_the_one_before() -> None:
    """Issue 68: reports were judged against ``status.restarts``, so while the status write
    that says attempt 2 had not landed (or was lost), the group's pods, already told 2 and
    restarted, had their progress and stacks refused (403). They are judged against the
    group's attempt, the one the job loop acts on; and the loop takes those stacks."""

    async def scenario() -> None:
        body = {**ddpjob("j", "ns", nodes=2), "status": {"restarts": 1}}
        body["metadata"] |= {"uid": "job-uid", "resourceVersion": "1"}
        pods = [
            WorkerPod(
                f"j-worker-{i}",
                i,
                0,
                "Running",
                uid=f"u{i}",
                owner_uid="job-uid",
                in_place=True,
                told=2,
                restarted=2,
                started=True,
                watching=True,
            )
            for i in range(2)
        ]
        loop = JobRunner(KEY, body, None, None)  # type: ignore[arg-type]
        await loop.stop()  # its pass is not what is tested: what it takes of the desk is
        jobs = Jobs()
        jobs.loop = loop  # type: ignore[assignment]
        jobs.index = type("Index", (), {"get": staticmethod(lambda key: pods)})()
        writes = Writes()
        desk = ProgressDesk(writes, jobs)  # type: ignore[arg-type]
        sender = Sender("ns", "j-worker-1", "u1")
        assert await desk.accept(*KEY, sender, {"step": 3, "total": 9}) == (202, "taken")
        assert writes.patches[0]["progress"]["attempt"] == 2
        assert (await desk.accept(*KEY, sender, {"step": 4, "attempt": 1}))[0] == 409
        frames = ["tmp/t.py:9 <module>"]
        said = {"stack": {"rank": 1, "frames": frames}, "attempt": 2}
        assert await desk.accept(*KEY, sender, said) == (202, "taken")
        taken = loop._stacks(resolve(body), pods)
        assert list(taken) == [1] and taken[1]["pod"] == "j-worker-1"
        # A pass that sees the group back at the status's attempt takes none of them.
        assert loop._stacks(resolve(body), [dataclasses.replace(p, told=1) for p in pods]) == {}
        desk.forget(KEY)

    asyncio.run(scenario())
