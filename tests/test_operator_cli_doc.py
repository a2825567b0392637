"""docs/reference/operator.md against `ddp-operator`'s own parser: every subcommand has its
section, each section's table lists exactly that subcommand's flags, and each default the table
gives is the parser's."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from ddp_operator.commands import cli

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "operator.md"
FLAG = re.compile(r"^(--?[A-Za-z][\w-]*)")


def subcommands(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in top._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parser_flags(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every option string of a subcommand but help's, with its action."""
    return {
        flag: action
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction)
        for flag in action.option_strings
    }


def section(page: str, command: str) -> str:
    match = re.search(rf"^## `ddp-operator {command}`\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    assert match, f"{PAGE.name} has no section '## `ddp-operator {command}`'"
    return match.group(1)


def rows(text: str) -> list[list[str]]:
    """The first table's rows (header and rule left out), as lists of cells."""
    table = []
    for line in text.splitlines():
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        elif table:
            break
    return table[2:]


def documented(cell: str) -> list[str]:
    """The flags a table's first cell names: each of its code spans starts with one."""
    return [m.group(1) for span in re.findall(r"`([^`]+)`", cell) if (m := FLAG.match(span))]


def shown(default: object) -> str | None:
    """How the page writes a parser default, or None where it is said in words."""
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, int | str) and default != "":
        return f"`{default}`"
    return None


@pytest.fixture
def top(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    monkeypatch.delenv("DDP_HELPERS_IMAGE", raising=False)  # --helpers-image's default
    return cli.parser()


def test_every_subcommand_has_its_section_with_exactly_its_flags(top):
    page = PAGE.read_text()
    commands = subcommands(top)
    assert "run" in commands
    for name, sub in commands.items():
        listed = [flag for row in rows(section(page, name)) for flag in documented(row[0])]
        assert len(listed) == len(set(listed)), f"a flag listed twice: {sorted(listed)}"
        flags = parser_flags(sub)
        assert set(listed) == set(flags), (
            f"`ddp-operator {name}`: on the page but not in the parser "
            f"{sorted(set(listed) - set(flags))}; in the parser but not on the page "
            f"{sorted(set(flags) - set(listed))}"
        )


def test_each_default_on_the_page_is_the_parser_s(top):
    page = PAGE.read_text()
    checked = 0
    for name, sub in subcommands(top).items():
        flags = parser_flags(sub)
        for row in rows(section(page, name)):
            assert len(row) == 3, f"a row of flag, default and meaning: {row}"
            for flag in documented(row[0]):
                want = shown(flags[flag].default)
                if want is not None:
                    checked += 1
                    assert row[1].startswith(want), f"{flag}: the page says {row[1]}, not {want}"
    assert checked >= 5  # --log-format, --api-concurrency, --metrics-port, ...


def test_the_chart_table_names_only_real_flags(top):
    page = PAGE.read_text()
    match = re.search(r"^## The chart's defaults.*?\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    assert match, "the page compares the chart's defaults with the CLI's"
    flags = parser_flags(subcommands(top)["run"])
    named = [flag for row in rows(match.group(1)) for flag in documented(row[0])]
    assert named and set(named) <= set(flags), sorted(set(named) - set(flags))
