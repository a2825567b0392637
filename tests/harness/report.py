"""The Markdown report of a chaos run (harness.chaos)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .scenario import KINDS
from .verify import FINISHED

if TYPE_CHECKING:
    from .chaos import Chaos

FAULT_NAMES = {
    "operator": "operator SIGKILLed and restarted",
    "control": "control plane stopped 5-20 s",
    "delete": "worker pod deleted",
    "silence": "node silenced 20-80 s, then revived",
    "hold": "worker pod held Terminating 5-20 s, then released",
}


def report(
    chaos: Chaos, phases: dict[str, str], problems: list[str], dups: list[str], lost: list[str]
) -> int:
    """Print the report; returns how many must-be-0 rows are not 0."""
    lines = [
        "",
        f"Chaos run: seed {chaos.seed}, {chaos.minutes:g} minutes of faults, namespace {chaos.ns}.",
        "",
        "| fault | injected | skipped (no target) |",
        "|---|---|---|",
    ]
    for kind, name in FAULT_NAMES.items():
        lines.append(f"| {name} | {chaos.injected[kind]} | {chaos.skipped[kind]} |")

    lines += [
        "",
        "| job kind | jobs | expected | Succeeded | Failed | not finished |",
        "|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        mine = [j for j in chaos.jobs if j.kind == kind]
        got = [phases.get(j.name, "") for j in mine]
        expected = mine[0].expected_phase if mine else ""
        lines.append(
            f"| {kind} | {len(mine)} | {expected} | {got.count('Succeeded')} | "
            f"{got.count('Failed')} | {sum(p not in FINISHED for p in got)} |"
        )

    stuck = [n for n, p in phases.items() if p not in FINISHED]
    named = {p.split(":", 1)[0] for p in problems}
    wrong = [j.name for j in chaos.jobs if j.name in named and j.name not in stuck]
    owners = [p for p in problems if p.startswith("pod ")]
    checks = [
        ("pods duplicated (Ledger: a worker of one attempt created twice, or two live)", dups),
        ("jobs stuck (not finished in time)", stuck),
        ("jobs wrong (finished, but outcome or status contradicts the pods)", wrong),
        ("pods owned by another job", owners),
        ("pods lost (a stuck or wrong job's current workers never created)", lost),
        ("operator exits not injected", ["exit"] * chaos.crashes),
    ]
    lines += ["", "| check | count | must be 0 |", "|---|---|---|"]
    lines += [f"| {what} | {len(found)} | yes |" for what, found in checks]
    lines += [
        "",
        f"Kubelet: {len(chaos.kubelet.finished)} pods ended; API errors outlived: Kubelet "
        f"{chaos.kubelet.transient}, Ledger {chaos.ledger.transient} "
        f"({chaos.ledger.lists} lists). Pods seen: {len(chaos.ledger.snapshot())}.",
    ]
    details = [*dups, *(f"stuck: {n} ({phases[n] or 'no phase'})" for n in stuck)]
    details += [*problems, *(f"lost: {w}" for w in lost)]
    if details:
        lines += ["", "Details:", *(f"- {d}" for d in details)]
    print("\n".join(lines), flush=True)
    return sum(1 for _, found in checks if found)
