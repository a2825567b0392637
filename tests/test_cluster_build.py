"""hack/cluster/build.sh: a go build that fails says how much room go had to write in. A full
disk ends a cold build "no space left on device", one line among hundreds of go's, and the
build's last words said only that a build had failed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.cluster import ROOT

BUILD = ROOT / "hack" / "cluster" / "build.sh"


def test_a_go_build_with_no_room_to_work_says_where_and_how_much_was_free(tmp_path: Path) -> None:
    """Go's work files on a full file system (a tmpfs of one page and two inodes, filled, in a
    mount namespace of the test's own): every build fails at its start, before it reads a
    module, each saying the room go had."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    full = (
        f'mount -t tmpfs -o size=4k,nr_inodes=2 tmpfs "{work}" && '
        f'(head -c 8192 /dev/zero > "{work}/filler" || true) && exec "{BUILD}"'
    )
    env = {**os.environ, "GOTMPDIR": str(work), "DDP_CACHE_DIR": str(cache)}
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", full],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert "no space left on device" in done.stderr, done.stderr
    gocache = subprocess.run(["go", "env", "GOCACHE"], capture_output=True, text=True, check=True)
    room = f"for its cache ({gocache.stdout.strip()}), 0 for its work files ({work}))"
    assert "etcd: go build failed (free: " in done.stderr and room in done.stderr, done.stderr
    assert not list(cache.glob("etcd-*/etcd")), "nothing is kept of a failed build"
