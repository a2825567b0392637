"""The user's pages teach: README.md and the pages under docs/ that users read (getting started,
concepts, tasks, operations, reference) hold no measurement diary, and the README's tables stay
tables of short cells. Measurement history belongs in docs/development/ and bench/README.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USER_SECTIONS = ("getting-started", "concepts", "tasks", "operations", "reference")
PAGES = [
    ROOT / "README.md",
    *sorted(page for section in USER_SECTIONS for page in (ROOT / "docs" / section).rglob("*.md")),
]

# Phrases of a measurement diary, matched case-insensitively in the prose (fenced code blocks,
# which show commands and their output, are left out). A user page says what the software does
# wherever it runs; who measured what, on which host, in which run or at what time of day is
# history, true of one run only, and it goes stale on a user page. It belongs in
# docs/development/tests.md or bench/README.md, which a user page links to.
DIARY = (
    r"\bthis machine\b",  # the host the author happened to use
    r"\bmy runs?\b",  # the author's own runs
    r"\bnot run here\b",  # "(not run here)": the author's host again
    r"\bnot seen in\b",  # "not seen in my runs"
    # a run by its number ("run 49", "(run 27"), not "run 2 workers"
    r"\brun \d+\b(?! ?(?:x\b|workers?|process|pods?|nodes?|jobs?|gpus?|npus?|ranks?|replicas?))",
    r"\(run \d+",
    r"\bruns \d+ (?:to|and) \d+\b",  # "runs 47 to 54"
    r"\b\d{1,2}:\d\d(?::\d\d)? ?UTC\b",  # a time of day: "13:57 UTC"
    r"\b\d{4}-\d\d-\d\d,? \d{1,2}:\d\d\b",  # a date with its time of day: "2026-11-29 13:57"
)
DIARY_RE = re.compile("|".join(f"(?:{phrase})" for phrase in DIARY), re.IGNORECASE)
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
MAX_README_CELL = 160


def prose(text: str) -> str:
    """The page without its fenced code blocks (their lines kept, blank, so lines count)."""
    return FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)


def diary(text: str) -> list[str]:
    return [
        f"line {number}: {match.group(0)!r}"
        for number, line in enumerate(prose(text).splitlines(), 1)
        for match in DIARY_RE.finditer(line)
    ]


def cells(text: str) -> list[tuple[int, str]]:
    """Every cell of every table row of a page, with its line number (code spans may hold |)."""
    found = []
    for number, line in enumerate(prose(text).splitlines(), 1):
        if line.startswith("|"):
            row = re.sub(r"`[^`]*`", lambda span: span.group(0).replace("|", "\0"), line)
            found += [
                (number, cell.strip().replace("\0", "|")) for cell in row.strip("|\n").split("|")
            ]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_user_page_keeps_no_measurement_diary(page):
    found = diary(page.read_text())
    assert not found, f"{page.relative_to(ROOT)}: move these to docs/development/: {found}"


def test_the_readme_table_cells_are_short():
    long = [
        f"line {number}: {len(cell)} characters: {cell[:60]}..."
        for number, cell in cells((ROOT / "README.md").read_text())
        if len(cell) > MAX_README_CELL
    ]
    assert not long, f"README.md cells over {MAX_README_CELL} characters: {long}"


def test_the_user_pages_are_found():
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "docs/getting-started/local.md", "docs/reference/operator.md"} <= names


@pytest.mark.parametrize(
    "line",
    [
        "Measured on this machine, 2 cores.",
        "Not seen in my runs.",
        "It took 15m53s (run 62 of the tests page).",
        "The same code in runs 47 to 54.",
        "A GPU test (not run here).",
        "2026-11-29 13:57, a fresh clone.",
        "at 04:30 UTC",
        "In run 49 it took longer.",
    ],
)
def test_each_diary_phrase_is_caught(line):
    assert diary(line), line


@pytest.mark.parametrize(
    "line",
    [
        "Every example runs 2 nodes x 2 processes.",
        "The job's pods run 2 workers in one pod each.",
        "kubectl ddp status shows what the machine's kubelet says.",
        "```console\n$ date\n2026-11-29 13:57 UTC\n```",
    ],
)
def test_plain_teaching_is_not_a_diary(line):
    assert not diary(line), line


def test_a_long_readme_cell_is_caught_and_a_pipe_in_code_is_no_cell_border():
    long = "x" * (MAX_README_CELL + 1)
    assert [len(cell) for _, cell in cells(f"| a | {long} |\n")] == [1, MAX_README_CELL + 1]
    assert [cell for _, cell in cells("| `a|b` | c |\n")] == ["`a|b`", "c"]
