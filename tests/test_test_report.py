"""hack/test_report.py, make test's closing report: the slowest tests of every session, the
steps' seconds, the budget a run is held to, the failed tests last with why, and a failed run
when no test ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPORT = Path(__file__).resolve().parents[1] / "hack" / "test_report.py"


def junit(path: Path, cases: list[tuple[str, float, str]]) -> None:
    """A JUnit file as pytest writes it: (name, seconds, outcome) per case."""
    body = []
    for name, seconds, outcome in cases:
        inner = {"passed": "", "failed": '<failure message="x"/>', "skipped": "<skipped/>"}
        body.append(
            f'<testcase classname="tests.test_x" name="{name}" time="{seconds}">'
            f"{inner[outcome]}</testcase>"
        )
    path.write_text(
        f'<testsuites><testsuite name="pytest">{"".join(body)}</testsuite></testsuites>'
    )


def report(tmp_path: Path, total: int, *steps: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPORT), str(tmp_path), str(total), *steps],
        capture_output=True,
        text=True,
    )


def test_the_slowest_tests_of_every_session_the_steps_and_the_warm_budget(tmp_path: Path) -> None:
    junit(tmp_path / "api.xml", [("test_a", 3.0, "passed"), ("test_b", 0.5, "skipped")])
    junit(tmp_path / "torch.xml", [("test_c@torch", 90.0, "failed"), ("test_d", 40.0, "passed")])
    done = report(tmp_path, 700, "lint=20", "build (beyond lint)=3", "cluster up=60")
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    slowest = lines[lines.index("== make test: the 25 slowest tests ==") + 1 :][:3]
    assert slowest[0].endswith("tests.test_x::test_c  (failed)") and "90.0s" in slowest[0], slowest
    assert "test_d" in slowest[1] and "test_a" in slowest[2], slowest
    assert "1m00s  cluster up" in lines
    files = lines[lines.index("== make test: the 15 slowest files ==") + 1 :][:1]
    assert files == ["2m13s  tests.test_x (4 tests)"], files
    assert "11m40s  in all: within the warm budget of 15m00s" in lines
    failed = lines[lines.index("== make test: failed ==") + 1 :]
    assert failed == ["tests.test_x::test_c", "x", "", "2 passed, 1 failed, 1 skipped"], failed


def test_a_run_whose_build_built_is_held_to_the_cold_budget(tmp_path: Path) -> None:
    junit(tmp_path / "all.xml", [("test_a", 1.0, "passed")])
    done = report(tmp_path, 2400, "lint=20", "build (beyond lint)=1500")
    lines = [line.strip() for line in done.stdout.splitlines()]
    assert "40m00s  in all: OVER the cold budget of 35m00s" in lines
    assert "== make test: failed ==" not in lines


def test_a_run_in_which_no_test_ran_fails(tmp_path: Path) -> None:
    junit(tmp_path / "all.xml", [("test_a", 1.0, "skipped")])
    done = report(tmp_path, 30, "lint=20")
    assert done.returncode == 1 and "no test ran" in done.stderr


def test_the_cpu_of_the_run_in_seconds_and_in_imports_of_torch(tmp_path: Path) -> None:
    """The machine's busy CPU-seconds over the run, its share of the cores, the least time that
    work needs on them against the budget, and the same in units of `import torch` measured after
    the run (runs on this machine vary by a third)."""
    junit(tmp_path / "all.xml", [("test_a", 1.0, "passed")])
    done = report(tmp_path, 1000, "--cpu=1500.4,2", "--torch-import=4.2", "lint=20")
    lines = [line.strip() for line in done.stdout.splitlines()]
    cpu = lines[lines.index("== make test: the CPU ==") + 1 :][:3]
    assert cpu == [
        "1,500 CPU-seconds (75% of 2 cores over the run)",
        "12m30s at the least for that work on 2 cores, each busy throughout: within the budget "
        "of 15m00s",
        "357 times `import torch` as this machine did it after the run (4.20 CPU-seconds)",
    ], cpu
    assert "0m20s  lint" in lines and lines[-1] == "1 passed, 0 failed, 0 skipped"
    over = report(tmp_path, 1500, "--cpu=2400,2", "lint=20").stdout
    assert "20m00s at the least for that work on 2 cores, each busy throughout: OVER" in over
    without = report(tmp_path, 1000, "lint=20").stdout
    assert "== make test: the CPU ==" not in without
    second = report(tmp_path, 1000, "--cpu=1500,2", "--second-node=31,240", "lint=20").stdout
    assert (
        "of which real-node-1: 31 CPU-seconds its daemons (the second node's own cost), 240 its "
        "pods' (tests' work placed there)"
    ) in second, second


FAILING = """
import subprocess, pytest

@pytest.fixture(scope="module")
def demo():
    script = "seq 1 40; echo 'demo: the job did not succeed' >&2; exit 1"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, f"make demo:\\n{done.stdout}\\n{done.stderr}"

def test_one(demo): pass
def test_two(demo): pass
def test_three(): raise RuntimeError("x" * 500 + " the end")
"""


def test_each_failure_says_why_once_for_the_tests_that_share_it(tmp_path: Path) -> None:
    """Real pytest's JUnit file: a module's fixture that fails on setup (a command's output in
    its message) is shown once for both its tests, with its first line and the output's end
    (where the command said what went wrong), without pytest's introspection; a long line is cut
    in its middle.
    CI shows only the log's tail, so this is where a failure in CI can be read."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "test_failing.py").write_text(FAILING)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "src",
            f"--junitxml={tmp_path / 'all.xml'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    lines = report(tmp_path, 30, "lint=20").stdout.splitlines()
    failed = lines[lines.index("== make test: failed ==") + 1 :]
    assert failed[:3] == [
        "  src.test_failing::test_one",
        "  src.test_failing::test_two",
        "      AssertionError: make demo:",
    ], failed
    assert failed[3] == "      [... 29 lines ...]", failed
    assert failed[4:15] == [f"      {n}" for n in range(30, 41)], failed
    assert failed[15] == "      demo: the job did not succeed", failed
    assert failed[16] == "  src.test_failing::test_three", failed
    long = failed[17]  # a long line keeps its start and its end (a command's error ends it)
    assert long.startswith("      RuntimeError: xxx") and long.endswith("xx the end"), long
    assert " ... " in long and len(long) == 6 + 160, long
    assert not any(line.strip().startswith(("assert ", "+ ", "[+")) for line in failed), failed
    assert failed[-1] == "0 passed, 3 failed, 0 skipped", failed


def test_each_file_s_seconds_are_written_for_the_next_run_s_order(tmp_path: Path) -> None:
    """``--durations-out``: seconds by file name, what tests/harness/schedule.py reads."""
    runs = tmp_path / "runs"
    runs.mkdir()
    junit(runs / "node.xml", [("test_a", 3.0, "passed"), ("test_b", 0.5, "failed")])
    out = tmp_path / "cache" / "durations.json"
    done = subprocess.run(
        [sys.executable, str(REPORT), f"--durations-out={out}", str(runs), "100", "lint=1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == {"test_x": 3.5}
