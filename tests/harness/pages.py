"""A documentation page's fenced code blocks, as a user copies them, and a user's shell to run
them in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from harness.cluster import ROOT

# A fence opening at any indentation (a block inside a list item is indented), its body, and the
# closing fence at the same indentation.
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>\w+)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
HEADING = re.compile(r"^## (.+)$", re.M)


def blocks(page: Path, language: str, section: str | None = None) -> list[str]:
    """The page's fenced blocks of ``language`` in order, dedented; with ``section``, only those
    under that ``## `` heading."""
    text = page.read_text()
    if section is not None:
        headings = list(HEADING.finditer(text))
        starts = [m for m in headings if m.group(1).strip() == section]
        assert starts, f"{page.name} has no section {section!r}"
        end = next((m.start() for m in headings if m.start() > starts[0].start()), len(text))
        text = text[starts[0].end() : end]
    return [
        textwrap.dedent(m.group("body"))
        for m in FENCE.finditer(text)
        if m.group("lang") == language
    ]


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell in the checkout: no KUBECONFIG (the local cluster), no virtualenv; then
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VIRTUAL_ENV")}
    venv = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv)
    return env | extra


def run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` in the checkout; it must succeed (its output's end in the failure)."""
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd[:2]}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def run_blocks(scripts: list[str], env: dict[str, str], timeout: float) -> str:
    """The blocks as one bash script, each command echoed (`set -x`) and the first failure
    ending it; the output."""
    script = "\n".join(scripts)
    return run(["bash", "-euxo", "pipefail", "-c", script], env, timeout).stdout
