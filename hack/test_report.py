"""make test's closing report: the slowest tests, where the time went, the run against its budget.

Usage: test_report.py [--cpu=SECONDS,CORES] [--torch-import=SECONDS] [--second-node=D,P]
[--durations-out=FILE] REPORT_DIR TOTAL_SECONDS
STEP=SECONDS...  (hack/test.sh). Reads the JUnit XML files pytest wrote into REPORT_DIR, one per
session. Prints the 25 slowest tests of all sessions, the 15 test files that took longest (their
tests' seconds summed, setup included), the seconds of each step, the whole run against the
budget (15 minutes warm, 35 cold: a run whose build took over a minute was cold), the CPU the
run used (``--cpu``: busy CPU-seconds of the machine, and its cores), the least time that work
needs on those cores against the same budget, and the same work in units of
``import torch`` as the machine does it after the run (``--torch-import``, CPU-seconds): how fast
the same work runs here varies by a third from run to run, and torch's start-up is most of the
suite's work (that import itself still varies too much to compare runs by: tests page); with
``--second-node``, what real-node-1 cost: its daemons' CPU-seconds and its pods'. With
``--durations-out``, it writes each test file's seconds there as JSON, by which the next run's node
session hands out its longest files first (tests/harness/schedule.py).
Then, last so that the tail of a CI log shows them (CI shows only a tail), the tests that failed,
each with why (the first line and the last lines of what it raised, once for the tests that
share it, such as a module's fixture), and a closing line ``N passed, N failed``. Exits 1 when no
test ran at all.
"""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 25
FILES = 15
WARM_BUDGET_S = int(os.environ.get("DDP_TEST_BUDGET_S", "900"))
COLD_BUDGET_S = int(os.environ.get("DDP_TEST_COLD_BUDGET_S", "2100"))
COLD_BUILD_S = 60  # a build step longer than this built something: the run was cold
_XDIST_GROUP = re.compile(r"@[\w.\-]+$")  # pytest-xdist's loadgroup suffix on a test's name
WHY_LINES = 12  # of a failure's message, the last ones shown (with its first)
WHY_WIDTH = 160  # characters of each
WHY_SHOWN = 4  # different failures shown with their message; the rest are in the sessions' logs
# pytest's own lines at the end of a message: its introspection, and its note that it cut it.
_PYTEST_TAIL = re.compile(r"^(assert |\+ +where |\[\+\d+ more line)")


def cases(report: Path) -> list[tuple[str, float, str, str]]:
    """Every test case of every session: (id, seconds, outcome, message of a failure)."""
    found = []
    for xml in sorted(report.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            test = _XDIST_GROUP.sub("", case.get("name", ""))
            name = f"{case.get('classname', '')}::{test}"
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = {"failure": "failed", "error": "error"}.get(child.tag, child.tag)
                    # What it raised, whole, from the report's text (pytest's E lines): the
                    # message attribute is cut (500 characters a line, some lines).
                    text = (child.text or "").splitlines()
                    raised = [line[1:].strip() for line in text if line.startswith("E ")]
                    message = "\n".join(raised) or child.get("message") or ""
                    break
            found.append((name, float(case.get("time", 0.0)), outcome, message))
    return found


def why(message: str) -> list[str]:
    """A failure's message as the report shows it: its first line (what was raised) and its
    last ``WHY_LINES`` (an output's end, where a command says what went wrong), without
    pytest's introspection, each cut to ``WHY_WIDTH`` characters: its start and its end (a
    command's error, after the command, ends a one-line message)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    while lines[1:] and _PYTEST_TAIL.match(lines[-1]):
        lines.pop()
    if len(lines) > WHY_LINES + 1:
        lines = [lines[0], f"[... {len(lines) - WHY_LINES - 1} lines ...]", *lines[-WHY_LINES:]]
    head = WHY_WIDTH // 2
    return [
        line if len(line) <= WHY_WIDTH else f"{line[:head]} ... {line[head + 5 - WHY_WIDTH :]}"
        for line in lines
    ]


def failures(found: list[tuple[str, float, str, str]], logs: Path) -> list[str]:
    """The failed tests, grouped by their message (a fixture's failure fails every test that
    uses it), each group followed by why; the first ``WHY_SHOWN`` groups only."""
    groups: dict[str, list[str]] = {}
    for name, _, outcome, message in found:
        if outcome in ("failed", "error"):
            groups.setdefault(message, []).append(name)
    lines = []
    for shown, (message, names) in enumerate(groups.items()):
        lines += [f"  {name}" for name in names]
        if shown < WHY_SHOWN:
            lines += [f"      {line}" for line in why(message)]
    if len(groups) > WHY_SHOWN:
        lines.append(f"  (why the others failed: {logs}/*.log)")
    return lines


def durations(found: list[tuple[str, float, str, str]]) -> dict[str, float]:
    """Seconds by test file (its name without ``.py``), setup included."""
    by_file: dict[str, float] = {}
    for name, seconds, *_ in found:
        module = name.split("::")[0]
        stem = next((p for p in module.split(".") if p.startswith("test_")), module)
        by_file[stem] = round(by_file.get(stem, 0.0) + seconds, 1)
    return by_file


def minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def cpu_lines(cpu: str | None, torch_import: str | None, total: int, budget: int) -> list[str]:
    """What the run's CPU was: busy CPU-seconds and the share of the cores over the run; the
    shortest such a run could be here, every core busy throughout, against the budget (a run
    over it for want of CPU, not of waits, needs less work or more cores); and the same work in
    units of ``import torch`` (CPU-seconds) where measured."""
    if not cpu:
        return []
    seconds, cores = (float(x) for x in cpu.split(","))
    floor = seconds / cores
    lines = [
        f"{seconds:,.0f} CPU-seconds ({100 * seconds / (cores * max(total, 1)):.0f}% of "
        f"{cores:.0f} cores over the run)",
        f"{minutes(floor)} at the least for that work on {cores:.0f} cores, each busy "
        f"throughout: {'within' if floor <= budget else 'OVER'} the budget of {minutes(budget)}",
    ]
    if torch_import and float(torch_import) > 0:
        unit = float(torch_import)
        lines.append(
            f"{seconds / unit:,.0f} times `import torch` as this machine did it after "
            f"the run ({unit:.2f} CPU-seconds)"
        )
    return lines


def main(argv: list[str]) -> int:
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    argv = [a for a in argv if not a.startswith("--")]
    report, total, steps = Path(argv[0]), int(argv[1]), [s.split("=", 1) for s in argv[2:]]
    found = cases(report)
    print(f"\n== make test: the {SLOWEST} slowest tests ==")
    for name, seconds, outcome, _ in sorted(found, key=lambda c: -c[1])[:SLOWEST]:
        print(f"{seconds:8.1f}s  {name}{'' if outcome == 'passed' else f'  ({outcome})'}")
    by_file: dict[str, list[float]] = {}
    for name, seconds, *_ in found:
        by_file.setdefault(name.split("::")[0], []).append(seconds)
    print(f"\n== make test: the {FILES} slowest files ==")
    for module, times in sorted(by_file.items(), key=lambda f: -sum(f[1]))[:FILES]:
        print(f"{minutes(sum(times)):>8}  {module} ({len(times)} tests)")
    print("\n== make test: where the time went ==")
    for step, seconds in steps:
        print(f"{minutes(int(seconds)):>8}  {step}")
    cold = any(step.startswith("build") and int(s) > COLD_BUILD_S for step, s in steps)
    budget = COLD_BUDGET_S if cold else WARM_BUDGET_S
    verdict = "within" if total <= budget else "OVER"
    print(
        f"{minutes(total):>8}  in all: {verdict} the {'cold' if cold else 'warm'} budget "
        f"of {minutes(budget)}"
    )
    cpu = cpu_lines(flags.get("cpu"), flags.get("torch-import"), total, budget)
    if cpu and flags.get("second-node"):
        daemons, pods = (int(x) for x in flags["second-node"].split(","))
        cpu.append(
            f"of which real-node-1: {daemons:,} CPU-seconds its daemons (the second node's own "
            f"cost), {pods:,} its pods' (tests' work placed there)"
        )
    if cpu:
        print("\n== make test: the CPU ==")
        for line in cpu:
            print(f"  {line}")
    failed = failures(found, report)
    if failed:
        print("\n== make test: failed ==")
        print("\n".join(failed))
    outcomes = [outcome for _, _, outcome, _ in found]
    counts = {o: outcomes.count(o) for o in ("passed", "failed", "error", "skipped")}
    print(
        f"\n{counts['passed']} passed, {counts['failed'] + counts['error']} failed, "
        f"{counts['skipped']} skipped"
    )
    if not found or counts["passed"] == 0:
        print("make test: no test ran", file=sys.stderr)
        return 1
    if flags.get("durations-out"):
        out = Path(flags["durations-out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(durations(found), indent=0, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
