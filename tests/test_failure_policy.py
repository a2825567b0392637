"""The failure policy (``failure_policy``): the first failure in time decides; the first rule it
matches gives the action; with none, disruptions restart the group uncounted, elastic workers
are replaced alone, anything else restarts the group counted; each action's bound hands over to
the next. Pure: facts in, a verdict out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ddp_operator.decide import failure_policy
from ddp_operator.decide.failure_facts import WorkerFailure, of_pod, ordered
from ddp_operator.decide.failure_policy import Bound, Counts, Handover
from ddp_operator.model import failure_policy as fp
from ddp_operator.model.jobspec import SpecError, resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"
NONE = Counts()


def job(rules: list[dict] | None = None, **spec):
    policy = {"rules": rules or [], **spec.pop("policy", {})}
    return resolve(ddpjob("j", "ns", **{"nodes": 4, **spec}, failurePolicy=policy))


def crash(index: int = 1, code: int = 3, reason: str = "Error", time: str = T0, **kw):
    return WorkerFailure(index, f"j-worker-{index}", reason, exit_code=code, time=time, **kw)


EVICTED = WorkerFailure(
    2,
    "j-worker-2",
    "EvictionByEvictionAPI",
    message="Eviction API: evicting",
    time=T0,
    conditions=(("DisruptionTarget", "EvictionByEvictionAPI"),),
    disruption=True,
    finished=False,
)


def test_a_crash_restarts_the_group_counted_against_the_backoff_limit() -> None:
    v = failure_policy.decide(job(backoffLimit=2), [crash()], NONE, alone="not elastic")
    assert (v.action, v.rule, v.collateral) == (fp.RESTART_GROUP, "default", 0)
    assert v.cause == "j-worker-1 exited with code 3 (Error)"
    assert v.count == "restart 1 of backoffLimit 2"


def test_past_the_backoff_limit_the_job_fails() -> None:
    v = failure_policy.decide(job(backoffLimit=1), [crash()], Counts(counted=1), "not elastic")
    assert (v.action, v.reason) == (fp.FAIL_JOB, "BackoffLimitExceeded")
    assert v.message.endswith("the group was restarted 1 times (backoffLimit 1)")


def test_a_disruption_restarts_the_group_without_counting_even_with_no_backoff() -> None:
    v = failure_policy.decide(job(backoffLimit=0), [EVICTED], NONE, "not elastic")
    assert v.action == fp.RESTART_GROUP_NOT_COUNTED
    assert v.cause == "j-worker-2 is being deleted: EvictionByEvictionAPI (Eviction API: evicting)"
    assert v.count == "not counted (a disruption; 1 of 10)"


def test_past_max_uncounted_restarts_a_disruption_counts() -> None:
    j = job(backoffLimit=1, policy={"maxUncountedRestarts": 2})
    v = failure_policy.decide(j, [EVICTED], Counts(uncounted=2), "not elastic")
    assert v.action == fp.RESTART_GROUP
    assert v.count == "restart 1 of backoffLimit 1; counted: past maxUncountedRestarts (2)"
    v = failure_policy.decide(j, [EVICTED], Counts(counted=1, uncounted=2), "not elastic")
    assert (v.action, v.reason) == (fp.FAIL_JOB, "BackoffLimitExceeded")


@pytest.mark.parametrize(
    ("rule", "failure", "matches"),
    [
        ({"onExitCodes": {"operator": "In", "values": [1, 3]}}, crash(), True),
        ({"onExitCodes": {"operator": "In", "values": [1]}}, crash(), False),
        ({"onExitCodes": {"operator": "NotIn", "values": [1]}}, crash(), True),
        ({"onExitCodes": {"operator": "NotIn", "values": [3]}}, crash(), False),
        ({"onExitCodes": {"operator": "NotIn", "values": [3]}}, EVICTED, False),  # no exit code
        ({"onReasons": ["OOMKilled"]}, crash(code=137, reason="OOMKilled"), True),
        ({"onReasons": ["OOMKilled"]}, crash(), False),
        ({"onPodConditions": [{"type": "DisruptionTarget"}]}, EVICTED, True),
        (
            {"onPodConditions": [{"type": "DisruptionTarget", "reason": "PreemptionByScheduler"}]},
            EVICTED,
            False,
        ),
        ({"onMessagePattern": "bad batch \\d+"}, crash(message="ValueError: bad batch 17"), True),
        ({"onMessagePattern": "^NCCL"}, crash(message="ValueError: bad batch 17"), False),
        (  # every matcher of a rule must match
            {"onExitCodes": {"operator": "In", "values": [3]}, "onMessagePattern": "CUDA"},
            crash(message="ValueError"),
            False,
        ),
    ],
)
def test_each_matcher(rule: dict, failure: WorkerFailure, matches: bool) -> None:
    j = job([{"name": "r", "action": "FailJob", **rule}])
    v = failure_policy.decide(j, [failure], NONE, "not elastic")
    assert (v.action == fp.FAIL_JOB and v.reason == "FailedByPolicy") == matches
    assert (v.rule == "r") == matches


def test_the_first_matching_rule_wins_and_is_named() -> None:
    j = job(
        [
            {"action": "RestartGroupNotCounted", "onExitCodes": {"operator": "In", "values": [3]}},
            {"name": "bug", "action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
        ]
    )
    v = failure_policy.decide(j, [crash()], NONE, "not elastic")
    assert (v.action, v.rule) == (fp.RESTART_GROUP_NOT_COUNTED, "rules[0]")
    assert "(failurePolicy rule rules[0]: RestartGroupNotCounted)" in v.cause
    assert v.count == "not counted (rule rules[0]; 1 of 10)"


def test_a_rule_can_count_a_preemption() -> None:
    j = job([{"action": "RestartGroup", "onPodConditions": [{"type": "DisruptionTarget"}]}])
    v = failure_policy.decide(j, [EVICTED], NONE, "not elastic")
    assert v.action == fp.RESTART_GROUP


def test_the_first_failure_in_time_decides_and_the_others_are_counted() -> None:
    victim = crash(0, 1, time=T1, message="RuntimeError: Connection reset by peer")
    cause = crash(3, 3, time=T0, message="ValueError: bad batch 17 in shard 3")
    failures = ordered([victim, cause])
    assert [f.index for f in failures] == [3, 0]
    j = job([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}])
    v = failure_policy.decide(j, failures, NONE, "not elastic")
    assert v.action == fp.RESTART_GROUP and v.collateral == 1  # exit 1 was not first
    assert v.cause.startswith("j-worker-3 exited with code 3 (Error): ValueError: bad batch 17")
    assert v.cause.endswith("; 1 other worker failed after it")


def test_within_a_second_a_collective_s_broken_connection_comes_after() -> None:
    victim = crash(0, 1, time=T0, message="RuntimeError: [gloo] Connection closed by peer")
    cause = crash(1, 3, time=T0, message="ValueError: bad batch")
    assert [f.index for f in ordered([victim, cause])] == [1, 0]
    deleted = WorkerFailure(0, "j-worker-0", "Deleted", gone=True, finished=False)
    assert [f.index for f in ordered([deleted, victim])] == [0, 0] and ordered([deleted, victim])[
        0
    ].time


def elastic(**spec):
    return job(nodes=3, minNodes=2, maxNodes=4, **spec)


def test_an_elastic_job_replaces_a_worker_alone_up_to_max_replacements() -> None:
    j = elastic(backoffLimit=1, policy={"maxReplacements": 2})
    v = failure_policy.decide(j, [crash(2)], Counts(replacements=1), alone=None)
    assert (v.action, v.count) == (fp.REPLACE_WORKER, "replacement 2 of at most 2")
    v = failure_policy.decide(j, [crash(2)], Counts(replacements=2), alone=None)
    assert v.action == fp.RESTART_GROUP
    assert v.count == "restart 1 of backoffLimit 1; not alone: maxReplacements (2) reached"


def test_the_bound_on_replacements_counts_every_worker_of_the_pass() -> None:
    """Issue 53: 9 of 10 done, 3 failing in one pass were all replaced (12 against 10)."""
    j = elastic(backoffLimit=1, policy={"maxReplacements": 10})
    three = [crash(1), crash(2), crash(3)]
    v = failure_policy.decide(j, three, Counts(replacements=9), alone=None)
    assert v.action == fp.RESTART_GROUP, v
    assert v.count.endswith("not alone: maxReplacements (10) reached: 9 replaced, 3 more"), v
    v = failure_policy.decide(j, three, Counts(replacements=7), alone=None)
    assert v.action == fp.REPLACE_WORKER, v


def test_an_elastic_worker_that_cannot_go_alone_gets_the_group_decision() -> None:
    v = failure_policy.decide(
        elastic(), [EVICTED], NONE, alone="worker 0 (the rendezvous host) failed"
    )
    assert v.action == fp.RESTART_GROUP_NOT_COUNTED
    assert "not alone: worker 0" in v.count


def test_a_replace_worker_rule_on_a_job_that_is_not_elastic_restarts_the_group() -> None:
    j = job([{"action": "ReplaceWorker", "onReasons": ["Error"]}])
    v = failure_policy.decide(j, [crash()], NONE, alone="not an elastic job")
    assert v.action == fp.RESTART_GROUP and "not alone: not an elastic job" in v.count


def test_a_status_from_before_the_counters_counted_every_restart() -> None:
    assert Counts.of({"restarts": 2, "replacements": 1}) == Counts(2, 0, 1)
    assert Counts.of({"restarts": 3, "countedRestarts": 1, "uncountedRestarts": 2}) == Counts(1, 2)


def test_record_counts_the_restart_and_names_the_first_failure() -> None:
    new = {"restarts": 1, "countedRestarts": 1, "uncountedRestarts": 0, "inPlaceRestarts": 1}
    v = failure_policy.decide(job(), [EVICTED], Counts.of(new), "not elastic")
    failure_policy.record(new, v, attempt=1, in_place=False)
    assert new["restarts"] == 2 and new["countedRestarts"] == 1
    assert new["uncountedRestarts"] == 1 and new["inPlaceRestarts"] == 1
    assert new["firstFailure"] == {
        "attempt": 1,
        "worker": 2,
        "pod": "j-worker-2",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "summary": "Eviction API: evicting",
        "time": T0,
        "action": fp.RESTART_GROUP_NOT_COUNTED,
        "rule": "default",
        "collateral": 0,
    }


T3, T9 = "2026-01-01T00:00:03Z", "2026-01-01T00:00:09Z"
ECHO = "RuntimeError: [pair.cc:534] Connection reset by peer"
CAUSE = "ValueError: bad batch 17 in shard 3"


@pytest.mark.parametrize(("late", "decides"), [(T1, 3), (T3, 3), (T9, 0)])
def test_an_echo_within_the_window_never_decides(late: str, decides: int) -> None:
    # failure_facts.COLLATERAL_WINDOW (5 s): the cause's pod ends later (torchrun tears its other
    # ranks down first); the echo of another pod comes first in time.
    echo = crash(0, 1, time=T0, message=ECHO)
    cause = crash(3, 1, time=late, message=CAUSE)
    assert ordered([echo, cause])[0].index == decides
    j = job([{"name": "bug", "action": "FailJob", "onMessagePattern": "ValueError"}])
    v = failure_policy.decide(j, ordered([echo, cause]), NONE, "not elastic")
    assert (v.action == fp.FAIL_JOB) is (decides == 3)


def test_echoes_alone_keep_the_order_in_time() -> None:
    one, two = crash(0, 1, time=T0, message=ECHO), crash(1, 1, time=T1, message=ECHO)
    assert [f.index for f in ordered([two, one])] == [0, 1]


def test_a_message_rule_sees_the_deciding_ranks_block_only() -> None:
    # Under torchrun (--tee 3) the pod's output holds rank 0's collateral NCCL error
    # ("Connection closed by remote peer") beside rank 1's ValueError, the root cause.
    text = (Path(__file__).parent / "data" / "torch" / "tee-value-error.log").read_text()
    failure = crash(1, 1, message=text)
    network = {"action": "RestartGroupNotCounted", "onMessagePattern": "Connection (closed|reset)"}
    v = failure_policy.decide(job([network]), [failure], NONE, "not elastic")
    assert v.rule == "default" and v.action == fp.RESTART_GROUP
    bug = {"name": "bug", "action": "FailJob", "onMessagePattern": "ValueError: bad batch"}
    v = failure_policy.decide(job([network, bug]), [failure], NONE, "not elastic")
    assert (v.rule, v.action) == ("bug", fp.FAIL_JOB)


@pytest.mark.timeout(60)
def test_a_pathological_pattern_is_matched_in_linear_time() -> None:
    # RE2: with Python's re, (a+)+b on 100,000 a's would not end in this test's life.
    pattern = resolve_rule({"onMessagePattern": "(a+)+b"}).message_pattern
    assert pattern is not None and pattern.search("a" * 100_000) is None
    j = job([{"action": "FailJob", "onMessagePattern": "(a+)+b"}])
    v = failure_policy.decide(j, [crash(message="a" * 100_000)], NONE, "not elastic")
    assert v.rule == "default"


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"(NCCL) \1", "invalid escape sequence"),  # a backreference: RE2 has none
        ("NCCL(?= error)", "invalid perl operator"),  # lookahead
        ("CUDA (out of memory", "missing )"),
    ],
)
def test_a_pattern_re2_refuses_is_refused_naming_the_field(pattern: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        job(
            [
                {"action": "FailJob", "onReasons": ["Error"]},
                {"action": "FailJob", "onMessagePattern": pattern},
            ]
        )
    said = str(refused.value)
    assert "spec.failurePolicy.rules[1].onMessagePattern is not a regular expression (RE2)" in said
    assert words in said


def test_re2_reads_what_python_re_would_not() -> None:
    rule = resolve_rule({"onMessagePattern": r"(?i)\p{Lu}\w+Error: CUDA"})
    assert rule.message_pattern is not None
    assert rule.message_pattern.search("torch.OutOfMemoryError: cuda out of memory")


def test_record_names_the_rank_and_the_failed_collective() -> None:
    text = (Path(__file__).parent / "data" / "torch" / "nccl-timeout-torchrun.log").read_text()
    v = failure_policy.decide(job(), [crash(0, 1, message=text)], NONE, "not elastic")
    assert v.cause.startswith("j-worker-0 (rank 1, local rank 1) exited with code 1 (Error): ")
    new: dict = {}
    failure_policy.record(new, v, attempt=0, in_place=False)
    first = new["firstFailure"]
    assert (first["rank"], first["localRank"]) == (1, 1)
    assert (first["collective"], first["collectiveSeqNum"]) == ("ALLREDUCE", 2)
    assert first["collectiveLine"] == "train.py:5"
    assert first["summary"].startswith("c10::DistBackendError: Watchdog caught collective")


def test_a_signal_with_no_exception_says_so() -> None:
    oom = crash(1, 137, reason="OOMKilled", message="step 18 loss 0.0526\nstep 19 loss 0.0500")
    v = failure_policy.decide(job(), [oom], NONE, "not elastic")
    assert v.cause == (
        "j-worker-1 exited with code 137 (OOMKilled, killed by SIGKILL): no exception in its output"
    )
    new: dict = {}
    failure_policy.record(new, v, attempt=0, in_place=False)
    assert "summary" not in new["firstFailure"]
    assert new["firstFailure"]["message"].endswith("step 19 loss 0.0500")


def resolve_rule(matchers: dict) -> fp.Rule:
    return job([{"action": "FailJob", **matchers}]).failure_policy.rules[0]


def test_a_deleted_worker_is_timed_from_its_deletion_and_comes_before_its_echo() -> None:
    """Issue 53: a pod deleted by hand had no time, and the peer it broke a second later
    decided the attempt."""
    # Deleted at T0 with the default grace: its deletionTimestamp is 30 s on.
    end = "2026-01-01T00:00:30Z"
    going = WorkerPod("j-worker-2", 2, 0, "Running", deleting=True, deletion_time=end)
    going = dataclasses.replace(going, deletion_grace=30)
    deleted = of_pod(going)
    assert (deleted.reason, deleted.time) == ("Deleted", T0)
    victim = crash(0, 1, time=T1, message="RuntimeError: [gloo] Connection closed by peer")
    assert [f.pod for f in ordered([victim, deleted])] == ["j-worker-2", "j-worker-0"]


def test_a_verdict_is_data_its_words_rendered_from_it() -> None:
    """Issue 53: the bound each action was held to and the handovers on the way are fields;
    ``count`` and ``message`` only render them."""
    v = failure_policy.decide(job(backoffLimit=2), [crash()], NONE, "not elastic")
    assert v.bound == Bound("backoffLimit", 1, 2) and v.handovers == ()
    v = failure_policy.decide(job(backoffLimit=1), [crash()], Counts(counted=1), "not elastic")
    assert v.bound == Bound("backoffLimit", 1, 1, within=False) and v.action == fp.FAIL_JOB
    j = job(backoffLimit=1, policy={"maxUncountedRestarts": 2})
    v = failure_policy.decide(j, [EVICTED], Counts(uncounted=2), "not elastic")
    assert v.handovers == (Handover("counted", "past maxUncountedRestarts (2)"),)
    assert v.bound == Bound("backoffLimit", 1, 1) and v.asked == fp.RESTART_GROUP_NOT_COUNTED
    e = elastic(backoffLimit=1, policy={"maxReplacements": 2})
    v = failure_policy.decide(e, [crash(2)], Counts(replacements=1), alone=None)
    assert v.bound == Bound("maxReplacements", 2, 2)
    v = failure_policy.decide(e, [crash(2)], Counts(replacements=2), alone=None)
    assert v.handovers == (Handover("not alone", "maxReplacements (2) reached"),)
    assert (v.asked, v.action, v.bound) == (
        fp.REPLACE_WORKER,
        fp.RESTART_GROUP,
        Bound("backoffLimit", 1, 1),
    )
    rules = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]
    v = failure_policy.decide(job(rules), [crash()], NONE, "not elastic")
    assert (v.rule, v.bound, v.reason) == ("rules[0]", Bound(""), "FailedByPolicy")
    assert v.count == "failurePolicy rule rules[0] says FailJob"
