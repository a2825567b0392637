"""hack/cluster/image.sh run twice at once, as make test does (its own build of the test images in
the background, a test asking for one meanwhile): what both need is made once, by one of them,
and both succeed. A cold CI of 2026-12-05 failed so: two runs fetched one wheelhouse into the
same temporary folder, and pip lost its wheels to the other's rm (FileNotFoundError)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.cluster import ROOT

IMAGE_SH = ROOT / "hack" / "cluster" / "image.sh"

# debootstrap as image.sh calls it (... SUITE ROOTFS MIRROR): counts its runs, takes a while, and
# leaves the tree image.sh then finishes (python3's library, where its marker would be).
DEBOOTSTRAP = """#!/bin/sh
echo run >> "$DDP_TEST_RUNS"
for last; do :; done
eval "rootfs=\\${$(($# - 1))}"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/lib/python3.11" "$rootfs/var/lib/apt/lists"
sleep 2
test -d "$rootfs/usr/local/bin" || { echo "rootfs gone under me" >&2; exit 1; }
echo fake > "$rootfs/usr/lib/python3.11/os.py"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="image.sh base needs root (as make test's host)")
def test_two_runs_at_once_make_the_base_once_and_both_succeed(tmp_path: Path) -> None:
    bin_dir, cache, runs = tmp_path / "bin", tmp_path / "cache", tmp_path / "runs"
    bin_dir.mkdir()
    fake = bin_dir / "debootstrap"
    fake.write_text(DEBOOTSTRAP)
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DDP_CACHE_DIR": str(cache),
        "DDP_TEST_RUNS": str(runs),
        "DDP_IMAGE_DATE": "20000101",
    }
    both = [
        subprocess.Popen(
            [str(IMAGE_SH), "base"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in both]
    for p, (out, err) in zip(both, outs, strict=True):
        assert p.returncode == 0, err
        assert out.split() == [
            str(cache / "images" / "python-base-v2-bookworm-20000101.tar"),
            "ddp-operator.io/python-base:3.11-bookworm-20000101-v2",
        ]
    assert runs.read_text().splitlines() == ["run"], "the base was made twice"
    assert not list((cache / "images").glob("*.rootfs")), "a tree was left behind"
