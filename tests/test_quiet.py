"""A hang in a script that reports no progress (``quiet``): every worker's processes quiet, as
each pod's watch says through its readiness (``workers.observe`` reads it from the pod's
ContainersReady condition), for the stall timeout; never while one computes, never for a job
that reports, never from a probe that never passed. Pure."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ddp_operator import progress_stacks
from ddp_operator.decide import culprit, quiet
from ddp_operator.decide.reconcile import plan
from ddp_operator.manifests import builders
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import observe

from jobs import ddpjob

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(**stall: Any):
    body = ddpjob("j", "ns", nodes=2, restartStrategy="InPlace", stallDetection=stall)
    body["metadata"]["uid"] = "job-uid"
    return resolve(body)


JOB = job(timeoutSeconds=60)


def worker(index: int, quiet_for: float | None, started: float = 600, trainer: bool = True):
    """An in-place worker whose watch started ``started`` s ago and has been unready (its
    trainer's processes quiet) for ``quiet_for`` s (None: ready), as its kubelet reports it."""
    manifest = copy.deepcopy(builders.build_worker_pod(JOB, index, 0, in_place=True))
    manifest["metadata"]["uid"] = f"uid-{index}"
    trainer_state = {"running": {"startedAt": at(started)}} if trainer else {"terminated": {}}
    statuses = [
        {"name": "trainer", "restartCount": 0, "state": trainer_state, "ready": trainer},
        {
            "name": "ddp-attempt-watch",
            "restartCount": 0,
            "state": {"running": {"startedAt": at(started)}},
            "ready": quiet_for is None,
        },
    ]
    ready = "True" if quiet_for is None else "False"
    since = at(started if quiet_for is None else quiet_for)
    conds = [{"type": "ContainersReady", "status": ready, "lastTransitionTime": since}]
    manifest["status"] = {"phase": "Running", "containerStatuses": statuses, "conditions": conds}
    return observe(manifest)


def running(since: float = 600) -> dict[str, Any]:
    return {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": at(since)}]}


def test_a_pod_is_quiet_since_its_watch_turned_unready_after_it_started() -> None:
    assert worker(0, quiet_for=30).quiet_since == at(30)
    assert worker(0, quiet_for=None).quiet_since is None
    # A probe that never passed (the condition False since before the watch started): nothing.
    assert worker(0, quiet_for=700, started=600).quiet_since is None
    # A trainer that ended is not quiet: it has ended (``outcomes``, ``failure_facts``).
    assert worker(0, quiet_for=30, trainer=False).quiet_since is None


def test_every_worker_quiet_for_the_timeout_is_a_stall() -> None:
    current = {0: worker(0, quiet_for=90), 1: worker(1, quiet_for=61)}
    stall, later = quiet.check(JOB, running(), current, NOW)
    assert stall is not None and stall.reason == "Stalled" and later is None
    assert stall.message == (
        f"no process of any worker has used 5% of a CPU core since {at(61)} "
        "(stall timeout 60s; the script reports no progress)"
    )
    # Counted from the last worker to fall quiet, and from the group's start.
    current[1] = worker(1, quiet_for=20)
    assert quiet.check(JOB, running(), current, NOW) == (None, pytest.approx(40))
    assert quiet.check(JOB, running(since=10), {0: current[0]}, NOW) == (None, None)
    both = {0: worker(0, quiet_for=90), 1: worker(1, quiet_for=90)}
    assert quiet.check(JOB, running(since=10), both, NOW) == (None, pytest.approx(50))


@pytest.mark.parametrize(
    ("spec", "status", "progress", "why"),
    [
        ({"timeoutSeconds": 60}, running(), None, None),
        ({"enabled": False}, running(), None, "stall detection off"),
        ({"timeoutSeconds": 60}, {"conditions": []}, None, "not all workers running"),
        ({"timeoutSeconds": 60}, running(), {"attempt": 0, "step": 3}, "the script reports"),
        ({"timeoutSeconds": 60}, {**running(), "replacing": [{"index": 1}]}, None, "replacing"),
    ],
)
def test_only_a_running_job_that_does_not_report_is_judged_by_its_processes(
    spec: dict[str, Any], status: dict[str, Any], progress: dict[str, Any] | None, why: str | None
) -> None:
    current = {0: worker(0, quiet_for=300), 1: worker(1, quiet_for=300)}
    stall, _ = quiet.stalled(job(**spec), status, current, progress, {}, 0, NOW)
    assert (stall is None) == (why is not None), why


def test_one_worker_that_computes_keeps_the_job_from_stalling() -> None:
    """A rank that saves a checkpoint or evaluates while the others wait for it: not a hang."""
    current = {0: worker(0, quiet_for=None), 1: worker(1, quiet_for=3000)}
    assert quiet.check(JOB, running(), current, NOW) == (None, None)


def test_the_automatic_timeout_of_a_job_that_never_reports_is_the_ceiling() -> None:
    current = {0: worker(0, quiet_for=299), 1: worker(1, quiet_for=299)}
    assert quiet.check(job(), running(), current, NOW)[1] == pytest.approx(1)


def test_a_quiet_group_is_restarted_as_stalled_through_the_failure_policy() -> None:
    pods = [worker(0, quiet_for=90), worker(1, quiet_for=70)]
    status = {"restarts": 0, **running()}
    p = plan(JOB, status, pods, NOW, generation=1)
    assert p.status["restarts"] == 1 and p.status["countedRestarts"] == 1
    assert p.status["firstFailure"]["reason"] == "Stalled"
    restarting = next(c for c in p.status["conditions"] if c["type"] == "Restarting")
    assert "the script reports no progress" in restarting["message"], restarting
    assert restarting["reason"] == "RestartingInPlace"


def test_a_quiet_stall_names_the_worker_whose_rank_stood_outside_torch() -> None:
    """Each rank of an unmodified script said where it stands (``progress_stacks.autostart``):
    the stall is worker 1's, on its node; stacks from before the group started do not count."""
    waits = ["t.py:10 <module>", "torch/distributed/distributed_c10d.py:2950 all_reduce"]
    sleeps = ["t.py:9 <module>"]

    def stack(rank: int, frames: list[str], ago: float) -> dict[str, Any]:
        kept = culprit.normalize({"rank": rank, "frames": frames}, rank, 2, f"j-worker-{rank}", NOW)
        return {**kept, "at": at(ago)}

    current = {0: worker(0, quiet_for=90), 1: worker(1, quiet_for=61)}
    stacks = {0: stack(0, waits, 70), 1: stack(1, sleeps, 70)}
    stall, _ = quiet.stalled(JOB, running(), current, None, stacks, 0, NOW)
    assert stall is not None and (stall.index, stall.pod) == (1, "j-worker-1")
    assert stall.node == current[1].node
    assert stall.message.startswith(
        "j-worker-1 (rank 1) never joined the collective: it stood at t.py:9 in <module>; "
        "rank 0 waits in all_reduce at t.py:10; no process of any worker has used 5% of a CPU "
        "core since "
    ), stall.message
    stale = {0: stack(0, waits, 700), 1: stack(1, sleeps, 700)}
    stall, _ = quiet.stalled(JOB, running(), current, None, stale, 0, NOW)
    assert stall is not None and stall.index == -1


GPU_STACKS = json.loads(
    (Path(__file__).parent / "data" / "torch" / "h200-nccl-stacks.json").read_text()
)


def gpu_stack(ago: float, quiet_for: int) -> dict[str, Any]:
    """Rank 0 on a real H200 (torch 2.11, NCCL, its pod's CPU 100% busy): its watch's stack, the
    script's own line waiting on the GPU, its recorder in all_reduce #4."""
    raw = {**GPU_STACKS["posts"][-1]["stack"], "quietSeconds": quiet_for}
    return {**culprit.normalize(raw, 0, 2, "j-worker-0", NOW), "at": at(ago)}


def culprit_stack(ago: float, quiet_for: int) -> dict[str, Any]:
    """Rank 1, elsewhere in its script, its recorder one collective behind."""
    raw = {
        "rank": 1,
        "frames": ["train.py:40 load_batch"],
        "collectives": [{"group": "default_pg", "entered": 3, "completed": 3, "op": "all_reduce"}],
        "quietSeconds": quiet_for,
    }
    return {**culprit.normalize(raw, 1, 2, "j-worker-1", NOW), "at": at(ago)}


def test_an_nccl_hang_whose_pods_spin_is_found_by_the_ranks_own_stacks() -> None:
    """Under NCCL a waiting rank spins a core: its pod is never quiet. Every rank's own stack
    says it stands still, again every resend period: once they have said so for the timeout,
    the job is stalled and the rank one collective behind is named."""
    assert all(p["stack"]["collectives"][0]["entered"] == 4 for p in GPU_STACKS["posts"])
    busy = {0: worker(0, quiet_for=None), 1: worker(1, quiet_for=None)}
    stacks = {0: gpu_stack(5, 76), 1: culprit_stack(10, 70)}
    stall, _ = quiet.stalled(JOB, running(), busy, None, stacks, 0, NOW)
    assert stall is not None and (stall.index, stall.node) == (1, busy[1].node)
    assert stall.message == (
        "j-worker-1 (rank 1) never joined all_reduce #4 (default_pg): it stood at train.py:40 in "
        "load_batch; rank 0 waits there at record/train.py:16; every rank has stood still since "
        f"{at(80)}: in one unfinished collective (its flight recorder) or under 5% of a CPU core "
        "(stall timeout 60s; the script reports no progress)"
    )
    # Said for 40 s only: the timeout is 20 s away by the clock.
    assert quiet.check(JOB, running(), busy, NOW, {**stacks, 1: culprit_stack(10, 40)}) == (
        None,
        pytest.approx(10),
    )
    # Past it by the clock, but not yet said: a look again soon, when the next stack comes.
    late = {0: gpu_stack(40, 41), 1: culprit_stack(40, 41)}
    assert quiet.check(JOB, running(), busy, NOW, late) == (None, quiet.AGAIN)
    # A rank whose latest stack is over two periods old moves again; one that never said; one
    # that said before the group started: none is quiet.
    for stale in ({**stacks, 1: culprit_stack(61, 70)}, {0: stacks[0]}):
        assert quiet.check(JOB, running(), busy, NOW, stale) == (None, None)
    assert quiet.check(JOB, running(since=8), busy, NOW, stacks) == (None, None)


def test_a_rank_says_it_is_still_quiet_as_often_as_the_operator_expects() -> None:
    assert progress_stacks.RESEND == c.STACK_RESEND_SECONDS


def test_a_kubeflow_script_s_evaluation_is_no_stall_while_a_worker_computes() -> None:
    """Issue 68: Hugging Face's KubeflowCallback posts at step ends only and cannot announce a
    phase, so its evaluation outlasting the stall timeout was a restart. Its step stall now
    waits while some worker computes (the same signal as a script that reports nothing), up to
    an hour from the last advance; with every worker quiet it stands, as it does for a script
    reporting by ``progress.report``, which can announce its evaluation."""
    evaluating = {"attempt": 0, "step": 40, "advanced": at(90), "protocol": "kubeflow"}
    busy = {0: worker(0, quiet_for=None), 1: worker(1, quiet_for=80)}
    stall, later = quiet.stalled(JOB, running(), busy, evaluating, {}, 0, NOW)
    assert stall is None and later == pytest.approx(3600 - 90)
    hung = {0: worker(0, quiet_for=80), 1: worker(1, quiet_for=80)}
    stall, _ = quiet.stalled(JOB, running(), hung, evaluating, {}, 0, NOW)
    assert stall is not None and stall.reason == "Stalled"
    # NCCL: rank 0 spins in all_reduce #4 (its stack says so), rank 1 hung outside it (quiet)
    spinning = {0: worker(0, quiet_for=None), 1: worker(1, quiet_for=80)}
    still = {0: gpu_stack(5, 76), 1: culprit_stack(10, 70)}
    assert quiet.stalled(JOB, running(), spinning, evaluating, still, 0, NOW)[0] is not None
    ours = {k: v for k, v in evaluating.items() if k != "protocol"}
    assert quiet.stalled(JOB, running(), busy, ours, {}, 0, NOW)[0] is not None
    long = {**evaluating, "advanced": at(3601)}
    stall, _ = quiet.stalled(JOB, running(since=4000), busy, long, {}, 0, NOW)
    assert stall is not None and stall.message.endswith(
        "; its processes still compute, past the 3600s allowed to a stretch without steps"
    )


def test_the_watch_s_word_counts_against_an_evaluation_once_it_has_had_time_to_change() -> None:
    """The watch judges a window and its probe says so a period later: work that began after a
    quiet window reads as quiet for up to two windows and a period. So a worker counts as quiet
    only once it has been for SETTLES since the later of its spell's start and the step's last
    advance, and the job is looked at again then. Seen in run 98: a resumed Trainer's 2 s steps
    barely computed (the watch said quiet), its callback skipped the last step's post (one every
    5 s at most), and the evaluation at the end was taken for a stall 30 s after step 29."""
    assert quiet.SETTLES >= 2 * c.QUIET_WINDOW_SECONDS + c.QUIET_PROBE_SECONDS
    brief = job(timeoutSeconds=30)  # the test's: under SETTLES
    recent = {"attempt": 1, "step": 29, "advanced": at(31), "protocol": "kubeflow"}
    # Quiet since before the step: the judgement of the steps, not of what came after.
    stepping = {0: worker(0, quiet_for=80), 1: worker(1, quiet_for=80)}
    stall, later = quiet.stalled(brief, running(), stepping, recent, {}, 1, NOW)
    assert stall is None and later == pytest.approx(quiet.SETTLES - 31)
    # One failed probe a moment ago, long after the step: too young as well.
    evaluating = {**recent, "advanced": at(90)}
    one_probe = {0: worker(0, quiet_for=3), 1: worker(1, quiet_for=80)}
    stall, later = quiet.stalled(brief, running(), one_probe, evaluating, {}, 1, NOW)
    assert stall is None and later == pytest.approx(quiet.SETTLES - 3)
    # Quiet for SETTLES after the step: the watch's judgement; every worker so, the stall stands.
    settled = {**recent, "advanced": at(quiet.SETTLES)}
    stall, _ = quiet.stalled(brief, running(), stepping, settled, {}, 1, NOW)
    assert stall is not None and stall.reason == "Stalled"


def test_a_rank_s_word_that_it_used_no_cpu_is_no_word_against_its_pod_s_watch() -> None:
    """CI of b3eefed: a resumed Trainer (one worker, in a gloo group of one) was restarted 30 s
    into its evaluation. Its steps barely computed on a busy machine, so its rank had said it
    stood still by its CPU; that stack, a minute fresh, stood for the rank while the evaluation
    computed, and the evaluation was taken for a stall. Only a rank in a collective it has not
    completed (an NCCL rank spins a core there) overrides its pod's watch; and a rank whose
    spell is over says so (``progress_stacks``), which takes its stack away (``culprit.keep``)."""
    brief = job(timeoutSeconds=30)
    evaluating = {"attempt": 1, "step": 24, "advanced": at(31), "protocol": "kubeflow"}
    busy = {0: worker(0, quiet_for=None), 1: worker(1, quiet_for=None)}
    stood = {0: {**culprit_stack(25, 20), "rank": 0, "worker": 0, "pod": "j-worker-0"}}
    stood[1] = culprit_stack(25, 20)  # each in its script, its collectives all completed
    stall, later = quiet.stalled(brief, running(), busy, evaluating, stood, 1, NOW)
    assert stall is None and later == pytest.approx(3600 - 31)
    waiting = {
        0: gpu_stack(5, 76),
        1: {**gpu_stack(5, 76), "rank": 1, "worker": 1, "pod": "j-worker-1"},
    }
    stall, _ = quiet.stalled(brief, running(), busy, evaluating, waiting, 1, NOW)
    assert stall is not None and stall.reason == "Stalled"
    # Two ranks a pod (NCCL): on worker 1, rank 2 spins in all_reduce #4 and rank 3, hung one
    # behind, is quiet: its pod is busy, yet its ranks stand still; so do worker 0's.
    body = ddpjob("j", "ns", nodes=2, procsPerNode=2, stallDetection={"timeoutSeconds": 30})
    two = resolve(body)

    def rank(r: int, stack: dict[str, Any]) -> dict[str, Any]:
        return {**stack, "rank": r, "worker": r // 2, "pod": f"j-worker-{r // 2}"}

    pairs = {r: rank(r, gpu_stack(5, 76)) for r in (0, 1, 2)} | {3: rank(3, culprit_stack(5, 70))}
    stall, _ = quiet.stalled(two, running(), busy, evaluating, pairs, 1, NOW)
    assert stall is not None and stall.reason == "Stalled"
    moved = dict(waiting)
    for rank in (0, 1):
        note = {"rank": rank, "frames": [], "moving": True}
        culprit.keep(moved, culprit.normalize(note, rank, 2, f"j-worker-{rank}", NOW), 1)
    assert moved == {}
    assert quiet.stalled(brief, running(), busy, evaluating, moved, 1, NOW)[0] is None
