"""How make test's node session shares the real node's tests among its workers (pytest-xdist
``--dist loadfile --no-loadscope-reorder``, hack/test.sh, with tests/conftest.py's scheduler).

Each file is a group of its own, run by one worker (its module fixtures made once), except
NODE_1_FILES: one group, run by one worker in that order, because each of them needs real-node-1
as it is and no other of them beside it (the lost-node tests stop its kubelet or cut its link, the
in-place faults restart it, the NetworkPolicy test stops its engine: each keeps the node for its
own jobs meanwhile, ``node_faults.kept``; the two-node tests and the docs' demo place a worker
there).

NODE_1_GROUP goes out first, whatever the durations say: its lost-node tests, first in it, then
take real-node-1 before other tests have finished pods there (``kept`` waits only for running
ones; a lost node's pods are evicted, finished ones too, and a test that read its finished
worker's log later lost it: run 86 of the tests page, whose order came from a run whose timeouts
made other files longer). The other groups go out longest first, by the seconds their tests
took in the last complete run (``DURATIONS_ENV`` names that file, written by hack/test_report.py):
xdist hands a freed worker the next group, so a long file handed out last would run alone at the
end, one core idle. A group of no known time goes first among them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

DURATIONS_ENV = "DDP_TEST_DURATIONS"
NODE_1_GROUP = "real-node-1"
NODE_1_FILES = (
    "test_realnode_lost_node",
    "test_realnode_inplace_faults",
    "test_realnode_netpol",
    "test_realnode_two_nodes",
    "test_docs_pages",
)


class Item(Protocol):
    """What of a pytest item the order reads."""

    @property
    def path(self) -> Path: ...


def _group(stem: str) -> str:
    """The group of the tests of file ``stem``: NODE_1_GROUP or that name."""
    return NODE_1_GROUP if stem in NODE_1_FILES else stem


def group_of(item: Item) -> str:
    """The group ``item`` runs in."""
    return _group(item.path.stem)


def scope_of(nodeid: str) -> str:
    """The group of the test ``nodeid`` (``tests/test_x.py::name[param]``): what xdist's
    scheduler hands out whole to one worker."""
    return _group(Path(nodeid.split("::")[0]).stem)


def last_durations(environ: Mapping[str, str] = os.environ) -> dict[str, float]:
    """Seconds by file (its name without ``.py``) in the last complete run; none if unknown or
    unreadable (the order is then xdist's own)."""
    path = environ.get(DURATIONS_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def group_seconds(durations: Mapping[str, float]) -> dict[str, float]:
    """Seconds by group: NODE_1_GROUP's files summed; every other group is its file (none with
    no durations)."""
    if not durations:
        return {}
    seconds = {stem: s for stem, s in durations.items() if stem not in NODE_1_FILES}
    seconds[NODE_1_GROUP] = sum(durations.get(stem, 0.0) for stem in NODE_1_FILES)
    return seconds


def keys(
    items: list[Item], seconds: Mapping[str, float]
) -> dict[int, tuple[bool, float, int, int]]:
    """Each item's place (by ``id``): its group's (NODE_1_GROUP first of all, then the longest
    first, one of unknown time first; with no durations at all, where the group first appears),
    then NODE_1_FILES in their order. Sorted stably by it, the items keep each file's own order."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(group_of(item), i)
    placed = {}
    for item in items:
        group, stem = group_of(item), item.path.stem
        node_1 = group == NODE_1_GROUP
        longest = -seconds.get(group, float("inf")) if seconds else 0.0
        within = NODE_1_FILES.index(stem) if node_1 else 0
        placed[id(item)] = (not node_1, longest, first[group], within)
    return placed


def scheduler(config: Any, log: Any) -> Any:
    """For xdist's ``pytest_xdist_make_scheduler``: under ``--dist loadfile``, its scheduler with
    these groups for files (xdist's ``loadgroup`` would do it by markers, but under pytest 9 its
    mark no longer reaches a test's id: each test went alone)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Grouped(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return Grouped(config, log)
