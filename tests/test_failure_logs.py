"""The whole story when the tail is not enough (``decide/failure_logs``, ``act/failure_logs``):
a failure whose termination message holds no exception asks for its log; the log's words
replace the message's where they hold one (summary, ``message``, rules); a read that fails
names why and leaves the message's words; a job loop reads the logs a plan asks for at once,
each once per pod and failed attempt.
The logs are constructed (tests/data/torch/README.md); a message is the log's last 2048 bytes,
as the kubelet keeps it."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from ddp_operator.act.failure_logs import FailureLogs
from ddp_operator.api.kube import Kube
from ddp_operator.decide import failure_logs as fl
from ddp_operator.decide import failure_policy
from ddp_operator.decide.failure_facts import WorkerFailure, of_pod
from ddp_operator.decide.failure_policy import Counts
from ddp_operator.decide.failures import Failure
from ddp_operator.decide.reconcile import plan
from ddp_operator.decide.torch_output import Collective
from ddp_operator.manifests import builders
from ddp_operator.model import failure_policy as fp
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod, observe

from jobs import ddpjob

TORCH = Path(__file__).parent / "data" / "torch"
NAN = "RuntimeError: loss is nan at step 17 (lr 0.5, batch 64): lower the learning rate"
NO_TRACEBACK = "exit code 1 (no traceback: no error file from @record)"
TIMEOUT = "c10::DistBackendError: Watchdog caught collective operation timeout"


def log(name: str) -> str:
    return (TORCH / f"{name}.log").read_text()


def tail(text: str) -> str:
    """The termination message the kubelet keeps of a log: its last 2048 bytes (80 lines)."""
    return "\n".join(text.encode()[-2048:].decode(errors="ignore").splitlines()[-80:])


def job(rules: list[dict] | None = None, **spec: Any):
    body = ddpjob("j", "ns", nodes=2, failurePolicy={"rules": rules or []}, **spec)
    body["metadata"]["uid"] = "u"
    return resolve(body)


def failed(name: str = "torchrun-no-record", code: int = 1, **kw: Any) -> WorkerPod:
    """Worker 0, its trainer ended with ``code``, its message the log's tail."""
    kw = {"message": tail(log(name)), "container": "trainer", "uid": "p0", **kw}
    return WorkerPod("j-worker-0", 0, 0, "Failed", owner_uid="u", exit_code=code, **kw)


def read_from(pod: WorkerPod, name: str, attempt: int = 0) -> fl.LogRead:
    """The log read for ``pod``'s failure, as the job loop keeps it."""
    ask = of_pod(pod).ask(attempt)
    assert ask is not None
    return fl.LogRead(ask.uid, attempt, fl.words_of(ask, log(name), capped=False), 3000)


def test_the_rank_s_exception_lies_beyond_the_kubelet_s_2048_bytes() -> None:
    text = log("torchrun-no-record")
    at = text.encode().rindex(b"[rank0]: RuntimeError")
    assert len(text.encode()) - at > 2048  # torch 2.11, Python 3.12: ~2.2 KB
    assert "RuntimeError" not in tail(text)


def test_from_the_message_alone_the_summary_is_missing_and_from_the_log_it_is_found() -> None:
    alone = of_pod(failed())
    assert alone.words.summary == NO_TRACEBACK and not alone.words.exception
    assert alone.source == fl.MESSAGE
    ask = alone.ask(attempt=0)
    assert ask == fl.LogAsk("j-worker-0", "p0", "trainer", False, 0, alone.message, 1)

    told = of_pod(failed(), log=read_from(failed(), "torchrun-no-record"))
    assert told.words.summary.startswith(NAN) and told.words.exception
    assert (told.words.rank, told.words.local_rank, told.source) == (0, 0, fl.LOG)
    assert told.ask(attempt=0) is None  # read once: never asked again
    assert told.describe() == (
        f"j-worker-0 (rank 0, local rank 0) exited with code 1 (Error): {told.words.summary}"
        " (read from its log)"
    )
    v = failure_policy.decide(job(), [told], Counts(), "not elastic")
    new: dict = {}
    failure_policy.record(new, v, attempt=0, in_place=False)
    first = new["firstFailure"]
    assert first["summary"].startswith(NAN) and first["source"] == "Log"
    assert "raise RuntimeError" in first["message"] and "logError" not in first


def test_a_cxx_abort_s_exception_and_collective_come_from_its_log() -> None:
    # An NCCL timeout under torchrun: the tail holds torchrun's SIGABRT only; the log holds the
    # watchdog's what() and, 7.5 KB before the end, the script's line of the collective.
    pod = failed("nccl-timeout-torchrun")
    alone = of_pod(pod)
    assert alone.words.summary == "killed by SIGABRT, no exception in its output"
    told = of_pod(pod, log=read_from(pod, "nccl-timeout-torchrun"))
    assert told.words.summary.startswith(TIMEOUT) and told.source == fl.LOG
    assert (told.words.collective.op, told.words.collective.line) == ("ALLREDUCE", "train.py:5")


@pytest.mark.parametrize(
    ("name", "code", "alone_says"),
    [
        ("h200-nccl-timeout-python", 134, ""),
        ("h200-nccl-timeout-torchrun", 1, "killed by SIGABRT, no exception in its output"),
    ],
)
def test_a_real_gpu_s_nccl_timeout_is_read_from_its_log(
    name: str, code: int, alone_says: str
) -> None:
    # Recorded on an H200 (torch 2.11, NCCL 2.28.9): the watchdog's C++ frames push its what()
    # beyond the kubelet's 2048 bytes even without torchrun, so the log is read.
    pod = failed(name, code=code)
    alone = of_pod(pod)
    assert alone.words.summary == alone_says and alone.ask(attempt=0) is not None
    told = of_pod(pod, log=read_from(pod, name))
    assert told.words.summary.startswith(f"{TIMEOUT}: WorkNCCL(SeqNum=4, OpType=ALLREDUCE")
    assert told.words.collective == Collective("ALLREDUCE", 4, "/tmp/record/train.py:15")
    assert told.source == fl.LOG and "frame #" not in told.words.lines


def test_a_rule_s_pattern_matches_the_log_s_words() -> None:
    rule = {"name": "nan", "action": "FailJob", "onMessagePattern": "loss is nan"}
    j = job([rule], backoffLimit=3)
    from_message = failure_policy.decide(j, [of_pod(failed())], Counts(), "not elastic")
    assert from_message.action == fp.RESTART_GROUP  # the tail does not say it
    read = read_from(failed(), "torchrun-no-record")
    from_log = failure_policy.decide(j, [of_pod(failed(), log=read)], Counts(), "not elastic")
    assert (from_log.action, from_log.rule, from_log.reason) == (
        fp.FAIL_JOB,
        "nan",
        "FailedByPolicy",
    )


def test_what_wants_no_log() -> None:
    with_exception = failed(message="Traceback (most recent call last):\nValueError: bad batch")
    assert of_pod(with_exception).ask(0) is None  # the message said it
    assert of_pod(failed(code=0)).ask(0) is None
    assert of_pod(failed(message="step 3\nexiting: bad config\n")).ask(0) is None  # all of it
    assert of_pod(failed(message="")).ask(0) is not None  # a File policy's: the log unread
    lines = "".join(f"step {i}\n" for i in range(80))  # 80 lines: the kubelet's limit
    assert of_pod(failed(message=lines)).ask(0) is not None
    assert of_pod(failed(), gone=True).ask(0) is None  # its pod is gone: so is its log
    deleted = WorkerFailure(1, "j-worker-1", "Deleted", uid="p1", gone=True, finished=False)
    assert deleted.ask(0) is None and deleted.source is None
    assert of_pod(failed(uid=None)).ask(0) is None


def test_a_log_that_says_no_more_leaves_the_message_s_words() -> None:
    whole = failed("oomkilled", 137, reason="OOMKilled")
    assert of_pod(whole).ask(0) is None  # its message is its whole log: nothing more to read
    steps = "".join(f"step {i} loss 0.0500\n" for i in range(200))
    oom = failed("oomkilled", 137, reason="OOMKilled", message=tail(steps))
    read = read_from(oom, "oomkilled")
    assert read.words is not None and not read.words.exception
    told = of_pod(oom, log=read)
    assert told.source == fl.MESSAGE and told.words.summary == ""
    assert told.describe().endswith("(OOMKilled, killed by SIGKILL): no exception in its output")


def test_a_log_cut_at_the_limit_is_read_with_the_message_after_it() -> None:
    # The first LIMIT_BYTES of the last lines: the log's end missing, the message holds it.
    text = log("torchrun-no-record")
    head = text[: text.index("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")]
    ask = of_pod(failed()).ask(0)
    assert ask is not None
    words = fl.words_of(ask, head + '  File "/usr/local/lib/py', capped=True)
    assert words.summary.startswith(NAN) and (words.rank, words.local_rank) == (0, 0)
    assert 'File "/usr/local/lib/py' not in words.lines  # the cut line left out


def test_a_log_that_cannot_be_read_says_why_and_the_message_names_the_failure() -> None:
    why = fl.unreadable(Failure(False, "Forbidden", 'pods "j-worker-0" is forbidden'))
    assert why.startswith("Forbidden: the operator may not get pods/log here")
    told = of_pod(failed(), log=fl.LogRead("p0", 0, error=why))
    assert told.words.summary == NO_TRACEBACK and told.source == fl.MESSAGE
    assert told.describe().endswith(f"{NO_TRACEBACK} (its log could not be read: {why})")
    v = failure_policy.decide(job(), [told], Counts(), "not elastic")
    new: dict = {}
    failure_policy.record(new, v, attempt=0, in_place=False)
    assert (new["firstFailure"]["source"], new["firstFailure"]["logError"]) == (
        "TerminationMessage",
        why,
    )


def test_a_container_that_ran_again_is_read_from_its_previous_run() -> None:
    body = ddpjob("j", "ns", nodes=1)
    body["metadata"]["uid"] = "u"
    pod = builders.build_worker_pod(resolve(body), 0, attempt=0)
    ended = {"exitCode": 1, "reason": "Error", "message": "x\n" * 80}
    pod["metadata"]["uid"] = "p0"
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "trainer", "state": {"waiting": {}}, "lastState": {"terminated": ended}}
        ],
    }
    again = observe(pod)
    assert again is not None and again.previous_run
    ask = of_pod(again).ask(0)
    assert ask is not None and ask.previous and ask.container == "trainer"
    pod["status"]["containerStatuses"][0] = {"name": "trainer", "state": {"terminated": ended}}
    assert not observe(pod).previous_run


def test_the_plan_asks_for_the_deciding_failure_s_log_and_acts_on_it_once_read() -> None:
    j = job(backoffLimit=2)
    running = WorkerPod("j-worker-1", 1, 0, "Running", uid="p1", owner_uid="u")
    status = {"conditions": [], "startTime": "2026-01-01T00:00:00Z"}
    now = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    first = plan(j, status, [failed(), running], now, generation=1)
    assert [ask.pod for ask in first.read_logs] == ["j-worker-0"]
    read = read_from(failed(), "torchrun-no-record")
    again = plan(j, status, [failed(), running], now, generation=1, logs={read.key: read})
    assert again.read_logs == []
    named = again.status["firstFailure"]
    assert named["summary"].startswith(NAN) and named["source"] == "Log"
    said = next(c for c in again.status["conditions"] if c["type"] == "Restarting")["message"]
    assert f"{NAN} or clip the gradients (read from its log)" in said


class FakeKube:
    """The one call ``FailureLogs`` makes, answering ``answer`` (or raising it)."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, []

    async def read_log(self, *args: Any) -> tuple[str, bool]:
        self.calls.append(args)
        if isinstance(self.answer, BaseException):
            raise self.answer
        if self.answer == "hang":
            await asyncio.sleep(60)
        return self.answer, False


def reads(answer: Any, attempts: list[int]) -> tuple[FakeKube, FailureLogs, list[dict]]:
    kube, posted = FakeKube(answer), []
    logs = FailureLogs(kube, post=lambda body, **event: posted.append(event))  # type: ignore
    ask = of_pod(failed()).ask(0)
    assert ask is not None

    async def passes() -> list[bool]:
        asks = [dataclasses.replace(ask, attempt=a) for a in attempts]
        return [await logs.read(job(), [one], {}) for one in asks]

    assert asyncio.run(passes()) == [a not in attempts[:i] for i, a in enumerate(attempts)]
    return kube, logs, posted


def test_a_job_loop_reads_once_per_failed_attempt_and_says_so() -> None:
    kube, logs, posted = reads(log("torchrun-no-record"), [0, 0, 0, 1, 1])
    assert len(kube.calls) == 2  # attempts 0 and 1, never per pass
    assert kube.calls[0] == ("ns", "j-worker-0", "trainer", False, fl.TIMEOUT_SECONDS)
    assert list(logs.reads) == [("u", "p0", 1)]  # an earlier attempt's read is forgotten
    assert [(e["type"], e["reason"]) for e in posted] == [("Normal", "FailureLogRead")] * 2
    assert posted[0]["message"].startswith("read the last 3183 bytes of pod j-worker-0's log")
    assert posted[0]["message"].endswith(
        f"its words come from there: {logs.reads[('u', 'p0', 1)].words.summary}"
    )
    assert list(logs.known(job())) == [("p0", 1)]


def test_a_forbidden_read_is_a_warning_on_the_job_and_the_pass_goes_on() -> None:
    denied = ApiException(status=403, reason="Forbidden")
    denied.body = (
        '{"message": "pods \\"j-worker-0\\" is forbidden: cannot get resource \\"pods/log\\""}'
    )
    kube, logs, posted = reads(denied, [0, 0])
    assert len(kube.calls) == 1
    error = logs.reads[("u", "p0", 0)].error
    assert (
        error.startswith("Forbidden: the operator may not get pods/log here")
        and "pods/log" in error
    )
    assert [(e["type"], e["reason"]) for e in posted] == [("Warning", "FailureLogUnreadable")]
    assert posted[0]["message"].endswith("named from its termination message")


def test_a_read_that_does_not_answer_in_time_never_holds_the_restart(monkeypatch) -> None:
    monkeypatch.setattr(fl, "TIMEOUT_SECONDS", 0.05)
    _, logs, posted = reads("hang", [0])
    assert logs.reads[("u", "p0", 0)].error == "no answer in 0.05s"
    assert posted[0]["reason"] == "FailureLogUnreadable"


@pytest.mark.parametrize("previous", [False, True])
def test_the_api_call_asks_for_the_end_of_the_log_within_the_bounds(previous: bool) -> None:
    asked: list[tuple] = []

    class Recording(Kube):
        async def _call(self, verb, method, path, body=None, content_type="", query="", **kw):
            asked.append((verb, method, path, query, kw))
            return b"x" * fl.LIMIT_BYTES

    kube = Recording.__new__(Recording)
    text, capped = asyncio.run(kube.read_log("ns", "j-worker-0", "trainer", previous, 5.0))
    assert capped and len(text) == fl.LIMIT_BYTES
    verb, method, path, query, kw = asked[0]
    assert (verb, method, path) == ("read_log", "GET", "/api/v1/namespaces/ns/pods/j-worker-0/log")
    want = f"tailLines={fl.TAIL_LINES}&limitBytes={fl.LIMIT_BYTES}"
    want += "&previous=true" if previous else ""
    assert query == want + "&container=trainer" and kw["timeout"] == (5.0, 5.0)


def test_the_logs_a_plan_asks_for_are_read_at_once_each_once_per_attempt() -> None:
    # Each read answers only once every read has been asked: one after the other, the first
    # would wait out its TIMEOUT_SECONDS and none would be read.
    asked: list[str] = []
    both = asyncio.Event()

    class Together:
        async def read_log(self, ns: str, pod: str, *rest: Any) -> tuple[str, bool]:
            asked.append(pod)
            if len(asked) == 2:
                both.set()
            await both.wait()
            return log("torchrun-no-record"), False

    posted: list[dict] = []
    logs = FailureLogs(Together(), post=lambda body, **event: posted.append(event))  # type: ignore
    ask = of_pod(failed()).ask(0)
    assert ask is not None
    other = dataclasses.replace(ask, pod="j-worker-1", uid="p1")

    async def passes() -> list[bool]:
        return [await logs.read(job(), [ask, other], {}) for _ in range(2)]

    assert asyncio.run(passes()) == [True, False]  # the second pass reads neither again
    assert asked == ["j-worker-0", "j-worker-1"]
    assert [r.words.summary.startswith(NAN) for r in logs.known(job()).values()] == [True] * 2
    assert [e["message"].split("'s log")[0][-10:] for e in posted] == ["j-worker-0", "j-worker-1"]
