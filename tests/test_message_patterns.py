"""``onMessagePattern`` costs what it costs once (``message_patterns``): a job's patterns are
compiled once, within a bound of memory each, and what they hold does not add up with the jobs.
A pattern over the bound, or rules over a job's bound, are the job's error, naming the field.
Pure: the operator's own modules in a process of their own, measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ddp_operator.model.jobspec import SpecError, resolve

from jobs import ddpjob

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20

# The costliest kind of pattern: a repeat of a large class (every letter) is compiled into one
# copy of the class's UTF-8 automaton per repeat. {55} is the most the bound of one pattern lets
# through; {400} passes the API server and RE2's own default bound (8 MiB), not the operator's.
WORST = "\\pL{55}"
OVER = "\\pL{400}"

# Ten jobs of twenty distinct patterns, resolved as the operator does (each pass of each job's
# loop, each stack report), and a failure of three of them judged by their rules (every rule
# searched: more patterns than are kept compiled), in a process holding the operator's modules.
# Prints the peak resident set and the baseline after imports (bytes); stops once past ``limit``.
SCRIPT = r"""
import json, re, sys
import ddp_operator.commands.cli  # the operator's process: its modules
from ddp_operator.decide import failure_policy
from ddp_operator.decide.failure_facts import WorkerFailure
from ddp_operator.model.jobspec import SpecError, resolve

limit, pattern, jobs, passes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def peak():  # this process's own high-water mark (ru_maxrss would be the forking pytest's)
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1)) * 1024

base = peak()
text = "Traceback (most recent call last):\nValueError: " + "bad batch é ü 17 " * 200

def body(job):
    rules = [
        {"name": f"r{i}", "action": "FailJob", "onMessagePattern": f"{pattern}j{job}r{i}"}
        for i in range(20)
    ]
    container = {"name": "trainer", "image": "t"}
    return {
        "metadata": {"name": f"j{job}", "namespace": "ns", "uid": f"u{job}", "generation": 1},
        "spec": {"nodes": 2, "template": {"spec": {"containers": [container]}},
                 "failurePolicy": {"rules": rules}},
    }

def operate(seen):
    for n in range(passes):
        for job in range(jobs):
            for _ in ("pass", "stack report"):
                try:
                    spec = resolve(json.loads(json.dumps(body(job))))  # a fresh one, as watched
                except SpecError:
                    spec = None
                    seen["refused"] += 1
            if n == 0 and job < 3 and spec:  # three jobs' first attempts fail
                failure = WorkerFailure(1, f"j{job}-worker-1", "Error", exit_code=1, message=text)
                seen["judged"] += failure_policy.action_for(spec, failure)[0] == "default"
            if peak() > limit:
                return

seen = {"base": base, "judged": 0, "refused": 0}
operate(seen)
print(json.dumps({**seen, "peak": peak()}))
"""


def chart_memory_limit() -> int:
    """The operator's memory limit in the chart's values (``256Mi``), in bytes."""
    values = yaml.safe_load((ROOT / "charts" / "ddp-operator" / "values.yaml").read_text())
    limit = values["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit.removesuffix("Mi")) * MiB


def run(*patterns: str, limit: int, jobs: int = 10, passes: int = 3) -> list[dict]:
    """``SCRIPT``'s figures for each pattern, each in a process of its own (side by side)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(limit), pattern, str(jobs), str(passes)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pattern in patterns
    ]
    said = [proc.communicate(timeout=240) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in said]
    return [json.loads(out) for out, _ in said]


@pytest.mark.timeout(300)
def test_ten_jobs_of_twenty_worst_case_patterns_stay_well_within_the_charts_memory() -> None:
    """Half the chart's limit is the room kept for everything else the operator holds, with
    the patterns the operator takes (``WORST``) and with those it refuses (``OVER``)."""
    room = chart_memory_limit() // 2
    accepted, over = run(WORST, OVER, limit=room)
    assert accepted["peak"] <= room, f"{accepted['peak'] / MiB:.0f} MiB, {accepted}"
    assert accepted["judged"] == 3 and accepted["refused"] == 0, accepted  # no rule matched
    assert over["peak"] <= room, f"{over['peak'] / MiB:.0f} MiB, {over}"
    assert over["refused"] == 10 * 3 * 2 and over["judged"] == 0, over


def job_with(*patterns: str):
    rules = [{"action": "FailJob", "onReasons": ["OOMKilled"]}]
    rules += [{"action": "FailJob", "onMessagePattern": p} for p in patterns]
    return resolve(ddpjob("j", "ns", failurePolicy={"rules": rules}))


def test_a_pattern_over_the_memory_bound_is_the_jobs_error_naming_its_field() -> None:
    with pytest.raises(SpecError) as refused:
        job_with("NCCL error", OVER)
    (said,) = refused.value.errors
    assert said.startswith("spec.failurePolicy.rules[2].onMessagePattern is too large: RE2 would")
    assert "more than 1 MiB" in said, said
    # The same class repeated less, or unbounded, is cheap.
    assert job_with(WORST, "(?i)\\pL+Error").failure_policy.rules[2].message_pattern


def test_a_jobs_patterns_add_up_to_at_most_4096_characters() -> None:
    fits = job_with(*(f"{i}" + "x" * 1023 for i in range(4)))
    assert len(fits.failure_policy.rules) == 5
    with pytest.raises(SpecError) as refused:
        job_with(*(f"{i}" + "x" * 1023 for i in range(5)))
    assert refused.value.errors == [
        "spec.failurePolicy.rules: the onMessagePattern of a job's rules must add up to at most "
        "4096 characters, not 5120"
    ]
