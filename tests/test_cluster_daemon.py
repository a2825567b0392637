"""hack/cluster/daemon.sh's helpers, run by bash as the scripts that source it run them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.cluster import ROOT

# What kubectl wait said for a CRD created a moment before, with no status yet (CI, 2026-12-05).
NO_STATUS = (
    "error: .status.conditions accessor error: <nil> is of the type <nil>, expected []interface{}"
)


def run_with_kubectl(tmp_path: Path, fails: int, call: str) -> subprocess.CompletedProcess:
    """``call`` in a bash that sources daemon.sh, its kubectl_ failing as kubectl wait does on a
    CRD with no status ``fails`` times, then succeeding; each call's arguments in tmp/calls."""
    script = f"""
set -euo pipefail
log() {{ echo "$*" >&2; }}
die() {{ log "$*"; exit 1; }}
kubectl_() {{
  echo "$*" >>"{tmp_path}/calls"
  if (($(wc -l <"{tmp_path}/calls") <= {fails})); then echo '{NO_STATUS}' >&2; return 1; fi
}}
source hack/cluster/daemon.sh
{call}
echo done
"""
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30
    )


def test_crds_without_a_status_yet_are_waited_for_not_failed(tmp_path: Path) -> None:
    done = run_with_kubectl(tmp_path, 2, "crds_established crds/ more.yaml")
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    expected = "wait --for=condition=Established --timeout=60s -f crds/ -f more.yaml"
    assert calls == [expected] * 3, calls
