"""An echo waits for its cause (``echo_hold``): the echo's pod seen failed alone, its log read
and saying only that a peer went away, while the cause's pod still runs: the job loop holds its
decision until the cause's pod ends (and its own words decide), the window at most."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from test_failure_facts import RULE, read, worker

from ddp_operator.decide import echo_hold
from ddp_operator.decide.failure_facts import of_pod
from ddp_operator.decide.reconcile import plan
from ddp_operator.model import failure_policy as fp
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

ECHO_AT = "2026-01-01T00:00:00Z"


def at(seconds: float) -> datetime:
    """``seconds`` after the echo's end."""
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def test_an_echo_seen_alone_waits_for_its_cause_whose_rule_then_decides() -> None:
    body = ddpjob("j", "ns", nodes=2, backoffLimit=3, failurePolicy={"rules": [RULE]})
    body["metadata"]["uid"] = "u"
    j = resolve(body)
    status = {"conditions": [], "startTime": ECHO_AT}
    echo = worker(0, "torchrun-echo", ECHO_AT)
    running = replace(worker(1, "torchrun-cause", ECHO_AT), phase="Running", exit_code=None)
    echo_log = read(echo, "torchrun-echo")
    # The echo's log is read first (its message is unsure), then the decision is held.
    first = plan(j, status, [echo, running], at(1), generation=1)
    assert [a.pod for a in first.read_logs] == ["j-worker-0"]
    held = plan(j, status, [echo, running], at(1), generation=1, logs={echo_log.key: echo_log})
    assert not held.status.get("firstFailure") and not held.status.get("restarts")
    assert held.status.get("phase") != "Failed" and 4 < (held.requeue_after or 0) <= 5
    # The cause's pod ends within the window: its log read, its rule fails the job, no restart.
    cause = worker(1, "torchrun-cause", "2026-01-01T00:00:02Z")
    logs = {echo_log.key: echo_log}
    asked = plan(j, status, [echo, cause], at(2), generation=1, logs=logs)
    assert [a.pod for a in asked.read_logs] == ["j-worker-1"]
    logs[read(cause, "torchrun-cause").key] = read(cause, "torchrun-cause")
    decided = plan(j, status, [echo, cause], at(3), generation=1, logs=logs)
    named = decided.status["firstFailure"]
    assert (named["worker"], named["action"]) == (1, fp.FAIL_JOB)
    assert decided.status["phase"] == "Failed" and not decided.status.get("restarts")


def test_the_hold_ends_with_the_window_and_never_holds_a_cause_or_a_lone_worker() -> None:
    echo = worker(0, "torchrun-echo", ECHO_AT)
    read_echo = of_pod(echo, log=read(echo, "torchrun-echo"))
    running = replace(worker(1, "torchrun-cause", ECHO_AT), phase="Running", exit_code=None)
    current: dict[int, WorkerPod] = {0: echo, 1: running}
    assert 3.8 < (echo_hold.wait([read_echo], current, 0, at(1.6)) or 0) < 4
    assert echo_hold.wait([read_echo], current, 0, at(6)) is None  # the window is over
    # Measured from the operator's first sight of the echo (its log read), on its own clock:
    # the kubelet's delay in saying the pod ended, or its clock ahead, costs the cause nothing.
    seen_late = of_pod(echo, log=replace(read(echo, "torchrun-echo"), at="2026-01-01T00:00:03Z"))
    assert 1.9 < (echo_hold.wait([seen_late], current, 0, at(6)) or 0) < 2.6
    ahead = of_pod(echo, log=replace(read(echo, "torchrun-echo"), at="2026-01-01T00:00:00Z"))
    skewed = worker(0, "torchrun-echo", "2026-01-01T00:01:00Z")  # its node's clock ahead
    assert (echo_hold.wait([of_pod(skewed, log=ahead.log)], current, 0, at(1)) or 0) <= 5.5
    assert echo_hold.wait([read_echo], {0: echo}, 0, at(1)) is None  # nobody else runs
    assert echo_hold.wait([of_pod(echo)], current, 0, at(1)) is None  # its log is read first
    said = worker(
        0, "torchrun-cause", ECHO_AT, message="Traceback (most recent call last):\nValueError: x"
    )
    assert echo_hold.wait([of_pod(said)], current, 0, at(1)) is None  # a cause decides now


# Real outputs users meet, as recorded (tests/data/torch/README.md): an NCCL watchdog's timeout
# under torchrun on an H200, a peer's NCCL remote error, gloo's timeout; the cause under
# torchrun --tee (every line prefixed) and without @record.
@pytest.mark.parametrize(
    "echo", ["h200-nccl-timeout-torchrun", "nccl-remote-error", "gloo-timeout"]
)
@pytest.mark.parametrize("cause", ["tee-value-error", "torchrun-cause"])
def test_real_echoes_wait_for_real_causes_whose_logs_decide(echo: str, cause: str) -> None:
    body = ddpjob("j", "ns", nodes=2, backoffLimit=3, failurePolicy={"rules": [RULE]})
    body["metadata"]["uid"] = "u"
    j = resolve(body)
    status = {"conditions": [], "startTime": ECHO_AT}
    echoed = worker(0, echo, ECHO_AT)
    running = replace(worker(1, cause, ECHO_AT), phase="Running", exit_code=None)
    logs = {}
    if (ask := of_pod(echoed).ask(0)) is not None:  # its message says too little: its log
        logs[ask.uid, 0] = read(echoed, echo)
    held = plan(j, status, [echoed, running], at(1), generation=1, logs=logs)
    assert not held.status.get("firstFailure") and 4 < (held.requeue_after or 0) <= 5.5
    ended = worker(1, cause, "2026-01-01T00:00:02Z")
    logs[read(ended, cause).key] = read(ended, cause)
    decided = plan(j, status, [echoed, ended], at(3), generation=1, logs=logs)
    named = decided.status["firstFailure"]
    assert (named["worker"], named["action"], named["source"]) == (1, fp.FAIL_JOB, "Log")
    assert named["summary"] == "ValueError: bad batch 17 in shard 3", named
