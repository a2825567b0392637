"""tests/harness/schedule.py: how make test's node session groups and orders the real node's
tests (pure), and that a real xdist run of its own takes those groups (one worker each)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import schedule
from harness.cluster import ROOT

XDIST = "-q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder"


@dataclass(frozen=True)
class Item:
    path: Path
    name: str


def items(*files: str) -> list[Item]:
    return [Item(Path(f"tests/{f}.py"), f"{f}::{i}") for i, f in enumerate(files)]


def ordered(got: list[Item], seconds: dict[str, float]) -> list[str]:
    placed = schedule.keys(got, schedule.group_seconds(seconds))
    return [i.name for i in sorted(got, key=lambda i: placed[id(i)])]


def test_the_files_that_need_real_node_1_are_one_group_and_others_their_own() -> None:
    groups = {schedule.group_of(i) for i in items(*schedule.NODE_1_FILES)}
    assert groups == {schedule.NODE_1_GROUP}
    assert schedule.group_of(items("test_realnode_jobs")[0]) == "test_realnode_jobs"


def test_the_longest_group_goes_first_and_one_of_no_known_time_before_it() -> None:
    got = items("test_a", "test_b", "test_a", "test_new", "test_c")
    seconds = {"test_a": 10.0, "test_b": 300.0, "test_c": 50.0}
    assert ordered(got, seconds) == [
        "test_new::3",
        "test_b::1",
        "test_c::4",
        "test_a::0",
        "test_a::2",
    ]


def test_real_node_1_s_files_count_together_and_run_in_their_order() -> None:
    lost, two, docs = (schedule.NODE_1_FILES[i] for i in (0, -2, -1))
    got = items(docs, "test_x", two, lost, two)
    # 100 + 100 + 100 against test_x's 250: the group goes first, the lost node's file first in it.
    seconds = {lost: 100.0, two: 100.0, docs: 100.0, "test_x": 250.0}
    assert ordered(got, seconds) == [
        f"{lost}::3",
        f"{two}::2",
        f"{two}::4",
        f"{docs}::0",
        "test_x::1",
    ]


def test_real_node_1_s_group_goes_first_even_where_others_took_longer() -> None:
    """Run 86's order came from a run whose timeouts made other files the longest: the lost-node
    tests then ran late, and real-node-1 took a finished pod of another test with it."""
    lost, two = schedule.NODE_1_FILES[0], schedule.NODE_1_FILES[-2]
    got = items("test_x", two, "test_new", lost)
    seconds = {lost: 10.0, two: 10.0, "test_x": 900.0}
    assert ordered(got, seconds) == [f"{lost}::3", f"{two}::1", "test_new::2", "test_x::0"]


def test_with_no_durations_groups_keep_where_they_first_appear_real_node_1_s_first() -> None:
    lost, two = schedule.NODE_1_FILES[0], schedule.NODE_1_FILES[-2]
    got = items("test_y", two, "test_x", lost)
    assert ordered(got, {}) == [f"{lost}::3", f"{two}::1", "test_y::0", "test_x::2"]


def test_durations_are_read_from_the_file_named_and_a_bad_one_is_none(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    env = {schedule.DURATIONS_ENV: str(path)}
    assert schedule.last_durations(env) == {}  # no file yet
    path.write_text(json.dumps({"test_a": 12.5, "test_b": "x"}))
    assert schedule.last_durations(env) == {"test_a": 12.5}
    path.write_text("{not json")
    assert schedule.last_durations(env) == {}
    assert schedule.last_durations({}) == {}


def test_a_real_xdist_run_gives_each_group_one_worker(tmp_path: Path) -> None:
    """Four files on two workers under make test's options: the two of real-node-1's group on one
    worker, in their order; each other file on one worker."""
    lost, two = schedule.NODE_1_FILES[0], schedule.NODE_1_FILES[-2]
    tests = tmp_path / "tests"
    (tests / "harness").mkdir(parents=True)
    for f in ("__init__.py", "schedule.py"):
        (tests / "harness" / f).write_text((ROOT / "tests" / "harness" / f).read_text())
    (tests / "conftest.py").write_text(  # what tests/conftest.py does with them
        "from harness import schedule\n"
        "def pytest_xdist_make_scheduler(config, log):\n"
        "    return schedule.scheduler(config, log)\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    if hasattr(config, 'workerinput'):\n"
        "        seconds = schedule.group_seconds(schedule.last_durations())\n"
        "        placed = schedule.keys(items, seconds)\n"
        "        items.sort(key=lambda item: placed[id(item)])\n"
    )
    log = tmp_path / "log"
    body = (
        "import os, time\n"
        "def test_{i}():\n"
        "    worker = os.environ['PYTEST_XDIST_WORKER']\n"
        "    with open({log!r}, 'a') as f:\n"
        "        f.write(f'{name} {{worker}} {{time.monotonic()}}\\n')\n"
    )
    for name in (two, lost, "test_short", "test_long"):
        (tests / f"{name}.py").write_text(
            "".join(body.format(i=i, log=str(log), name=f"{name}::{i}") for i in range(2))
        )
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({two: 5, lost: 5, "test_short": 1, "test_long": 50}))
    run = subprocess.run(
        # make test's node session's options (hack/test.sh), on two workers.
        [sys.executable, "-m", "pytest", *XDIST.split(), "tests"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", schedule.DURATIONS_ENV: str(durations)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    worker = {test: w for test, w, _ in lines}
    ran = [test for test, _, _ in sorted(lines, key=lambda line: float(line[2]))]
    group = [t for t in ran if t.split("::")[0] in (lost, two)]
    assert group == [f"{lost}::0", f"{lost}::1", f"{two}::0", f"{two}::1"], ran
    assert len({worker[t] for t in group}) == 1, worker
    assert worker["test_long::0"] == worker["test_long::1"], worker
