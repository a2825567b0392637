"""hack/test.sh, `make test`'s steps: its output sent to a file keeps every step's lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.cluster import ROOT

A_TEST = "def test_one():\n    print('the session ran')\n"


def test_make_test_into_a_file_keeps_what_came_before_the_tests(tmp_path: Path) -> None:
    """``make test >FILE``: the lines before the first session (lint's, the build's) stay in
    FILE. A session shown by a redirection to /dev/stdout opened FILE again from its start.
    A copy of test.sh and the report runs one session (DDP_TEST_WORKERS=0) on a test of its own,
    with KUBECONFIG set (no local cluster) and, for ``make lint``, a command that says it ran."""
    (tmp_path / "hack").mkdir()
    for name in ("test.sh", "test_report.py"):
        shutil.copy2(ROOT / "hack" / name, tmp_path / "hack" / name)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # this run's environment
    (tmp_path / "test_a.py").write_text(A_TEST)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "make").write_text('#!/bin/sh\necho "make $*: lint passed"\n')
    (stubs / "make").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "DDP_TEST_WORKERS": "0",
        "PYTEST_ARGS": f"-p no:cacheprovider -s --rootdir {tmp_path} {tmp_path / 'test_a.py'}",
    }
    log = tmp_path / "make-test.log"
    with log.open("w") as out:
        done = subprocess.run(
            ["bash", "hack/test.sh"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
        )
    text = log.read_text(errors="replace")
    assert done.returncode == 0, text
    assert text.startswith("make --no-print-directory lint: lint passed\n"), text[:400]
    assert "the session ran" in text and "1 passed, 0 failed, 0 skipped" in text, text
    assert "\0" not in text and "Traceback" not in text, text
