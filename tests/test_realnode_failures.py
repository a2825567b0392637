"""Failures understood, in real containers on the real node: a failure policy that fails a job
on the script's own error at once, the first failure in time named with its last lines (the
collateral ones counted), an OOMKilled worker named by its reason, and an exception beyond the
termination message read from the log (``failure_policy``, ``failure_facts``, ``last_words``,
``failure_logs``; the trainer's ``FallbackToLogsOnError``)."""

from __future__ import annotations

import re
import textwrap

import pytest

from harness import jobs, pods
from harness.cluster import Cluster, wait_for
from harness.operator import OperatorProcess
from harness.realnode import NODE, kubectl_ddp, shell_job, touch, trainer_job, trainer_status

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(900)]

# The script comes in the container's env and is written out first: the image stays as built.
RUN = 'printf "%s" "$SCRIPT" > /tmp/t.py && exec {launcher} /tmp/t.py'

EVERY_RANK_RAISES = """
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    raise ValueError(f"bad batch 17 in shard {dist.get_rank()}")

if __name__ == "__main__":
    main()
"""

WORKER_1_FIRST = """
import os, sys, time, traceback
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
if os.environ["NODE_RANK"] == "1":
    while not os.path.exists("/tmp/go"):  # the test's word: its operator is down by then
        time.sleep(0.05)
    try:
        raise ValueError("bad batch 17 in shard 3")
    except ValueError:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)  # not sys.exit: torch's teardown with a live gloo group can segfault (139)
dist.all_reduce(torch.ones(1))  # worker 0: broken by worker 1's end
"""


# No @record: torchrun's traceback and Root Cause block follow the rank's exception, and the
# platform's wrapper prints its post-mortem after torchrun: the exception is far beyond the
# kubelet's last 2048 bytes (torch 2.11 alone puts it ~2.2 KB before the end).
EVERY_RANK_NAN = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
raise RuntimeError(f"loss is nan at step 17 on rank {dist.get_rank()}")
"""
WRAPPER = (
    'printf "%s" "$SCRIPT" > /tmp/t.py; torchrun /tmp/t.py; rc=$?; i=0; while [ $i -lt 16 ]; '
    'do echo "post-mortem $i: the node\'s disks, memory and devices, for the platform"; '
    "i=$((i+1)); done; exit $rc"
)

# Worker 1's rank raises; worker 0's breaks in the next collective (gloo: connection closed by
# peer). Under torchrun without @record neither pod's termination message holds an exception.
CAUSE_AND_ECHO = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
if dist.get_rank() == 1:
    raise ValueError("bad batch 17 in shard 3")
dist.all_reduce(torch.ones(1))  # worker 0: broken by worker 1's end
"""
HELD = "post-mortem done: the pod ends when the platform says"
# The wrapper's post-mortem, then the platform's word (the test's) ends the pod.
HELD_WRAPPER = WRAPPER.replace(
    "exit $rc", f'echo "{HELD}"; while [ ! -e /tmp/end ]; do sleep 0.1; done; exit $rc'
)


def held(cluster: Cluster, namespace: str, pod: str) -> bool:
    """Whether the pod's torchrun and its wrapper's post-mortem are done (HELD_WRAPPER): it runs
    on until the test says."""
    if pods.phase(cluster, namespace, pod) != "Running":
        return False
    last = cluster.core.read_namespaced_pod_log(pod, namespace, container="trainer")
    return last.rstrip("\n").rsplit("\n", 1)[-1] == HELD


def cause_and_echo(name: str, namespace: str, image: str) -> dict:
    """A job of CAUSE_AND_ECHO under HELD_WRAPPER, a rule failing it on the cause's error."""
    rule = {"name": "bad-batch", "action": "FailJob", "onMessagePattern": "ValueError: bad batch"}
    job = trainer_job(
        name,
        namespace,
        image,
        ["sh", "-c", HELD_WRAPPER],
        backoffLimit=3,
        failurePolicy={"rules": [rule]},
    )
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [{"name": "SCRIPT", "value": textwrap.dedent(CAUSE_AND_ECHO)}]
    return job


def scripted(name: str, ns: str, image: str, script: str, launcher: str, **spec) -> dict:
    args = ["sh", "-c", RUN.format(launcher=launcher)]
    job = trainer_job(name, ns, image, args, **spec)
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [{"name": "SCRIPT", "value": textwrap.dedent(script)}]
    return job


def test_a_rule_fails_the_job_on_the_script_s_own_error_after_one_attempt(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """2 workers x 2 torchrun processes, every rank raises (torchrun exits 1) on every attempt;
    the rule "exit 1 -> FailJob" fails the job at once (no restart of the 3 allowed), with the
    exception's line, which torchrun's Root Cause block carries (the script uses ``@record``)."""
    rule = {"name": "script-bug", "action": "FailJob"}
    rule["onExitCodes"] = {"operator": "In", "values": [1]}
    job = scripted(
        "bug",
        namespace,
        images["trainer"],
        EVERY_RANK_RAISES,
        "torchrun",
        procsPerNode=2,
        backoffLimit=3,
        failurePolicy={"rules": [rule]},
    )
    jobs.apply(cluster, job)
    done = jobs.wait_phase(cluster, namespace, "bug", "Failed", timeout=300)
    failed = jobs.condition(done, "Failed")
    assert failed["reason"] == "FailedByPolicy", failed
    assert "ValueError: bad batch 17 in shard" in failed["message"], failed
    assert "failurePolicy rule script-bug says FailJob" in failed["message"], failed
    status = done["status"]
    assert status["restarts"] == 0 and status.get("countedRestarts", 0) == 0, status
    first = status["firstFailure"]
    assert (first["exitCode"], first["action"], first["rule"]) == (1, "FailJob", "script-bug")
    assert first["localRank"] in (0, 1) and "ValueError" in first["summary"], first


def test_the_first_failure_is_named_first_and_the_collateral_counted(
    cluster: Cluster, own_operator: tuple[str, list[OperatorProcess]], images: dict[str, str]
) -> None:
    """Worker 1 exits 3 first; worker 0 then fails on the broken collective (gloo: connection
    closed by peer). The operator is down meanwhile (worker 1 fails when the test says, once it
    has killed it), and a new one finds both failed at once, in its first list of the pods: the
    job names worker 1, exit 3 and its exception first, and counts worker 0 (a lower index, the
    old message's first) as collateral. Not a paused operator: on a busy machine, the backlog of
    its watch may come in two batches, the first holding worker 1's failure alone."""
    namespace, ops = own_operator
    job = scripted("first", namespace, images["trainer"], WORKER_1_FIRST, "python", backoffLimit=0)
    jobs.apply(cluster, job)

    def ended(pod: str) -> bool:  # the trainer (in-place pods keep running their watch)
        status = trainer_status(cluster, namespace, pod)
        return bool(status and status.state.terminated)

    def trainer_running(pod: str) -> bool:
        if pods.phase(cluster, namespace, pod) != "Running":  # None: not created yet
            return False
        status = trainer_status(cluster, namespace, pod)
        return bool(status and status.state.running)

    wait_for(lambda: trainer_running("first-worker-1"), timeout=180, what="worker 1 running")
    ops[0].kill()
    touch(cluster, namespace, "first-worker-1", "/tmp/go")
    wait_for(
        lambda: ended("first-worker-0") and ended("first-worker-1"),
        timeout=120,
        what="both workers failed",
    )
    ops.append(OperatorProcess(cluster, namespace).start())
    ops[-1].wait_ready()
    done = jobs.wait_phase(cluster, namespace, "first", "Failed", timeout=60)
    message = jobs.condition(done, "Failed")["message"]
    lead = f"first-worker-1 exited with code 3 (Error) on node {NODE}: ValueError: bad batch 17"
    assert message.startswith(lead), message
    assert "1 other worker failed after it" in message and "first-worker-0" not in message
    events = jobs.wait_event(cluster, namespace, "first", "BackoffLimitExceeded")
    assert any(e["message"].startswith(lead) for e in events), events
    first = done["status"]["firstFailure"]
    assert (first["worker"], first["exitCode"], first["collateral"]) == (1, 3, 1), first
    assert "raise ValueError" in first["message"], first  # the traceback's last lines
    shown = kubectl_ddp(cluster, "status", "first", "-n", namespace)
    assert "first failure (attempt 0): worker 1: exit code 3, Error" in shown, shown


def test_an_oom_killed_worker_is_named_and_a_rule_on_oomkilled_fails_the_job(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """Worker 1 touches 512 MB under a 64 MiB limit: the kernel kills it, the kubelet says
    OOMKilled; the rule on that reason fails the job at once, naming the worker."""
    script = (
        'if [ "$NODE_RANK" = 1 ]; then echo allocating; '
        'exec python3 -c "b = bytearray(512 * 1024 * 1024)"; fi; exec sleep 300'
    )
    job = shell_job("oom", namespace, images["trainer"], script, backoffLimit=3)
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}
    rule = {"action": "FailJob", "onReasons": ["OOMKilled"]}
    job["spec"]["failurePolicy"] = {"rules": [rule]}
    jobs.apply(cluster, job)
    done = jobs.wait_phase(cluster, namespace, "oom", "Failed", timeout=180)
    failed = jobs.condition(done, "Failed")
    assert failed["reason"] == "FailedByPolicy", failed
    assert failed["message"].startswith("oom-worker-1 exited with code 137 (OOMKilled"), failed
    first = done["status"]["firstFailure"]
    assert (first["worker"], first["reason"], first["rule"]) == (1, "OOMKilled", "rules[0]")


def test_an_exception_beyond_the_termination_message_is_read_from_the_log_once(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """torchrun without ``@record``, every rank raises a RuntimeError; a wrapper prints after
    torchrun. The termination message holds torchrun's Root Cause block, not the exception; the
    operator reads the failed workers' logs, each once (the deciding worker's among them), and
    names the exception from it."""
    job = trainer_job("nan", namespace, images["trainer"], ["sh", "-c", WRAPPER], backoffLimit=0)
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [{"name": "SCRIPT", "value": textwrap.dedent(EVERY_RANK_NAN)}]
    jobs.apply(cluster, job)
    done = jobs.wait_phase(cluster, namespace, "nan", "Failed", timeout=300)
    first = done["status"]["firstFailure"]
    told = trainer_status(cluster, namespace, first["pod"]).state.terminated.message
    assert "Root Cause" in told and "RuntimeError" not in told, told  # beyond its 2048 bytes
    assert first["source"] == "Log" and "logError" not in first, first
    assert first["summary"].startswith("RuntimeError: loss is nan at step 17 on rank"), first
    assert first["rank"] == first["worker"] and "raise RuntimeError" in first["message"], first
    failed = jobs.condition(done, "Failed")["message"]
    assert "RuntimeError: loss is nan at step 17" in failed and "(read from its log)" in failed
    jobs.wait_event(cluster, namespace, "nan", "FailureLogRead")
    # Passes after the end (the pods let go, their watches exit, the pods end) read no more.
    wait_for(
        lambda: all(
            w["status"].get("phase") in ("Succeeded", "Failed")
            for w in jobs.workers(cluster, namespace, "nan")
        ),
        timeout=60,
        what="the workers ended",
    )
    read = [e for e in jobs.events(cluster, namespace, "nan") if e["reason"] == "FailureLogRead"]
    where = r"of pod (\S+)'s log \(container trainer\)"
    got = [
        re.search(where, e["message"]).group(1) for e in read for _ in range(e.get("count") or 1)
    ]
    assert first["pod"] in got and len(got) == len(set(got)), read
    assert not [e for e in jobs.events(cluster, namespace, "nan") if "Unreadable" in e["reason"]]


def test_the_cause_s_own_log_decides_though_its_echo_ended_first(
    cluster: Cluster, own_operator: tuple[str, list[OperatorProcess]], images: dict[str, str]
) -> None:
    """3 jobs at once: torchrun without ``@record``, worker 1's rank raises a ValueError and
    worker 0's collective breaks; a wrapper prints after torchrun. Neither termination message
    holds an exception, and worker 0 (the echo) ends first: the test ends it, then worker 1,
    while the operator is down, so that a new one finds both failed in its first pass. It
    reads both logs before ordering, and the rule on the ValueError fails every job at once,
    naming worker 1."""
    namespace, ops = own_operator
    names = [f"echo{i}" for i in range(3)]
    for name in names:
        jobs.apply(cluster, cause_and_echo(name, namespace, images["trainer"]))
    pods_ = [f"{name}-worker-{i}" for name in names for i in (0, 1)]

    ready = lambda: all(held(cluster, namespace, p) for p in pods_)  # noqa: E731
    wait_for(ready, timeout=300, what="every torchrun ended")
    ops[0].kill()
    for pod in pods_:  # worker 0, then worker 1 (an exec later: within the same few seconds)
        touch(cluster, namespace, pod, "/tmp/end")

    def ended(pod: str) -> bool:
        status = trainer_status(cluster, namespace, pod)
        return bool(status and status.state.terminated)

    wait_for(lambda: all(ended(p) for p in pods_), timeout=120, what="every worker failed")
    ops.append(OperatorProcess(cluster, namespace).start())
    ops[-1].wait_ready()
    for name in names:
        done = wait_for(
            lambda name=name: (
                (j := jobs.get(cluster, namespace, name))
                and ((s := j.get("status") or {}).get("phase") == "Failed" or s.get("restarts"))
                and j
            ),
            timeout=60,
            what=f"{name} failed or restarted",
        )
        status = done["status"]
        first = status["firstFailure"]
        assert status["restarts"] == 0 and status.get("countedRestarts", 0) == 0, first
        assert (first["worker"], first["rule"], first["action"]) == (1, "bad-batch", "FailJob")
        assert first["summary"] == "ValueError: bad batch 17 in shard 3", first
        assert (first["source"], first["collateral"]) == ("Log", 1), first
        failed = jobs.condition(done, "Failed")
        assert failed["reason"] == "FailedByPolicy", failed
        lead = f"{name}-worker-1 (rank 1, local rank 0) exited with code 1 (Error) on node {NODE}"
        assert failed["message"].startswith(lead), failed
        assert "raise ValueError" in first["message"], first  # the cause's traceback

        def read_from(name: str = name) -> list[str]:  # each pod read from, once per read
            found = jobs.events(cluster, namespace, name)
            return sorted(
                pod
                for e in found
                if e["reason"] == "FailureLogRead"
                for pod in [re.search(r"of pod (\S+)'s log", e["message"]).group(1)]
                * (e.get("count") or 1)
            )

        # Both logs, each once: the echo's says a peer went away, the cause's the ValueError.
        both = [f"{name}-worker-0", f"{name}-worker-1"]
        assert wait_for(lambda: len(read_from()) >= 2 and read_from(), timeout=15) == both


def test_an_echo_seen_alone_waits_for_its_cause_whose_rule_then_decides(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """The same job with the operator up all along: worker 0 (the echo) ends first and is seen
    failed alone, its log saying only that a peer went away; worker 1 (the cause) ends a moment
    later. The operator holds its decision for the cause (``echo_hold``), whose rule fails the
    job with no restart, naming worker 1."""
    jobs.apply(cluster, cause_and_echo("echo-live", namespace, images["trainer"]))
    echo, cause = "echo-live-worker-0", "echo-live-worker-1"

    ready = lambda: held(cluster, namespace, echo) and held(cluster, namespace, cause)  # noqa: E731
    wait_for(ready, timeout=300, what="both torchruns ended")
    touch(cluster, namespace, echo, "/tmp/end")
    # The operator sees the echo failed alone and reads its log (its first sight of it, from
    # which the cause has 5 s): then the cause ends.
    wait_for(
        lambda: any(
            e["reason"] == "FailureLogRead" and echo in e["message"]
            for e in jobs.events(cluster, namespace, "echo-live")
        ),
        timeout=60,
        interval=0.2,
        what="the echo's log read",
    )
    touch(cluster, namespace, cause, "/tmp/end")
    done = wait_for(
        lambda: (
            (j := jobs.get(cluster, namespace, "echo-live"))
            and ((s := j.get("status") or {}).get("phase") == "Failed" or s.get("restarts"))
            and j
        ),
        timeout=60,
        what="the job failed or restarted",
    )
    first = done["status"]["firstFailure"]
    assert done["status"]["restarts"] == 0, first
    assert (first["worker"], first["rule"], first["action"]) == (1, "bad-batch", "FailJob")
