"""The logs read before an attempt's failures are ordered (``failure_facts.to_read``): where the
first failure's words are not sure (its termination message holds no exception), the logs of
every failure that may be its cause are read with its own, and the cause's own words decide.
The cause's and the echo's logs were recorded on the real node (tests/data/torch/README.md); a
message is the log's last 2048 bytes, as the kubelet keeps it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ddp_operator.decide import failure_logs as fl
from ddp_operator.decide.failure_facts import of_pod, ordered, to_read
from ddp_operator.decide.reconcile import plan
from ddp_operator.model import failure_policy as fp
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

TORCH = Path(__file__).parent / "data" / "torch"
T0, T1, T3, T9 = (f"2026-01-01T00:00:0{s}Z" for s in (0, 1, 3, 9))
CAUSE = "ValueError: bad batch 17 in shard 3"
RULE = {"name": "bad-batch", "action": "FailJob", "onMessagePattern": "ValueError: bad batch"}


def log(name: str) -> str:
    return (TORCH / f"{name}.log").read_text()


def tail(text: str) -> str:
    """The termination message the kubelet keeps of a log: its last 2048 bytes (80 lines)."""
    return "\n".join(text.encode()[-2048:].decode(errors="ignore").splitlines()[-80:])


def worker(index: int, name: str, time: str, **kw) -> WorkerPod:
    """Worker ``index`` of attempt 0, its trainer ended with torchrun's exit code 1 at ``time``,
    its message the tail of log ``name``."""
    kw = {"message": tail(log(name)), **kw}
    return WorkerPod(
        f"j-worker-{index}",
        index,
        0,
        "Failed",
        uid=f"p{index}",
        owner_uid="u",
        exit_code=1,
        reason="Error",
        container="trainer",
        finished_at=time,
        **kw,
    )


def read(pod: WorkerPod, name: str) -> fl.LogRead:
    """The log read for ``pod``'s failure, as the job loop keeps it."""
    ask = of_pod(pod).ask(0)
    assert ask is not None
    return fl.LogRead(ask.uid, 0, fl.words_of(ask, log(name), capped=False), 3000)


# The echo ends first, or in the same second: it comes first, and its log alone says only that
# a peer went away (where the cause ends first, its own log was read first, and decided).
@pytest.mark.parametrize(("echo_at", "cause_at"), [(T0, T0), (T0, T1), (T0, T3)])
def test_both_logs_are_read_before_acting_and_the_cause_s_rule_decides(
    echo_at: str, cause_at: str
) -> None:
    body = ddpjob("j", "ns", nodes=2, backoffLimit=3, failurePolicy={"rules": [RULE]})
    body["metadata"]["uid"] = "u"
    j = resolve(body)
    echo, cause = worker(0, "torchrun-echo", echo_at), worker(1, "torchrun-cause", cause_at)
    status = {"conditions": [], "startTime": "2026-01-01T00:00:00Z"}
    now = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    for failure in (of_pod(echo), of_pod(cause)):  # neither message tells the cause
        assert not failure.words.exception and not failure.words.collateral
    first = plan(j, status, [echo, cause], now, generation=1)
    assert sorted(ask.pod for ask in first.read_logs) == ["j-worker-0", "j-worker-1"]
    reads = {r.key: r for r in (read(echo, "torchrun-echo"), read(cause, "torchrun-cause"))}
    again = plan(j, status, [echo, cause], now, generation=1, logs=reads)
    assert again.read_logs == []
    named = again.status["firstFailure"]
    assert (named["worker"], named["rule"], named["action"]) == (1, "bad-batch", fp.FAIL_JOB)
    assert (named["summary"], named["source"], named["collateral"]) == (CAUSE, "Log", 1)
    assert again.status["phase"] == "Failed" and not again.status.get("restarts")


def test_the_reads_are_bounded_to_the_failures_that_may_come_first() -> None:
    # None where the first failure's words are sure: its message holds its exception, or its
    # log was read (its cause, unsure, is then read alone).
    said = worker(0, "torchrun-echo", T0, message=f"Traceback (most recent call last):\n{CAUSE}")
    unsure = of_pod(worker(1, "torchrun-cause", T0))
    assert to_read(ordered([of_pod(said), unsure]), 0) == []
    echo = worker(0, "torchrun-echo", T0)
    read_once = of_pod(echo, log=read(echo, "torchrun-echo"))
    assert read_once.words.collateral
    assert [a.pod for a in to_read(ordered([read_once, unsure]), 0)] == ["j-worker-1"]
    # Within failure_facts.COLLATERAL_WINDOW (5 s) of the first: a later failure could not come
    # first once read.
    late = of_pod(worker(1, "torchrun-cause", T9))
    assert [a.pod for a in to_read(ordered([late, of_pod(echo)]), 0)] == ["j-worker-0"]
    # MAX_READS at most, the earliest failures first.
    failures = [of_pod(worker(i, "torchrun-echo", T1 if i < 4 else T0)) for i in range(12)]
    asked = [a.pod for a in to_read(ordered(failures), 0)]
    assert asked == [f"j-worker-{i}" for i in range(4, 12)] and len(asked) == fl.MAX_READS
