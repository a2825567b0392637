"""How make test's node session shares the real node's tests among its workers (pytest-xdist
``--dist loadfile --no-loadscope-reorder``, hack/test.sh, with tests/conftest.py's scheduler).

Each file is a group of its own, run by one worker (its module fixtures made once), except
NODE_1_FILES: one group, run by one worker in that order, because each of them takes real-node-1
from every other test (the lost-node tests stop its kubelet or cut its link, the in-place faults
restart it, the NetworkPolicy test stops its engine): each module holds the lock ``real-node-1``
and keeps the node for its own jobs meanwhile (``node_1_kept``). NODE_1_SHARED's files (the
two-node tests, the docs' demo) place a worker there and only need it as it is: each holds that
lock shared (``node_1_as_is``), beside each other and every other test, never beside the group.

The groups go out longest first, by the seconds their tests took in the last complete run
(``DURATIONS_ENV`` names that file, written by hack/test_report.py): xdist hands a freed worker
the next group, so a long file handed out last would run alone at the end, one core idle. A
group of no known time goes first. NODE_1_SHARED's go out when NODE_1_GROUP should have ended, as
the durations foretell for the session's workers: before it, their workers would wait on the
lock; together with it at the start (the group, the longest, goes first), the session once
lasted as long as their five files one after another (801 of 817 s, run 79 of the tests page).
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
)
NODE_1_SHARED = ("test_realnode_two_nodes", "test_docs_pages")
WORKERS_ENV = "PYTEST_XDIST_WORKER_COUNT"  # set by xdist in its workers


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


def order(groups: list[str], seconds: Mapping[str, float], workers: int) -> list[str]:
    """``groups`` (as they first appear) in the order they go out: longest first (unknown first
    of all; with no durations, as they are), NODE_1_SHARED's moved to where the first worker free
    after NODE_1_GROUP's end, by ``seconds`` on ``workers`` workers, would take them."""
    if not seconds:
        return list(groups)
    ranked = sorted(groups, key=lambda g: -seconds.get(g, float("inf")))
    shared = [g for g in ranked if g in NODE_1_SHARED]
    rest = [g for g in ranked if g not in NODE_1_SHARED]
    if not shared or NODE_1_GROUP not in rest:
        return ranked
    free = [0.0] * max(1, workers)  # when each worker is next free
    end = None
    for i, group in enumerate(rest):
        start = min(free)
        if end is not None and start >= end:
            return rest[:i] + shared + rest[i:]
        free[free.index(start)] = start + seconds.get(group, 0.0)
        if group == NODE_1_GROUP:
            end = start + seconds.get(group, 0.0)
    return rest + shared


def keys(
    items: list[Item], seconds: Mapping[str, float], workers: int = 4
) -> dict[int, tuple[int, int]]:
    """Each item's place (by ``id``): its group's in ``order`` on ``workers`` workers, then
    NODE_1_FILES in their order. Sorted stably by it, the items keep each file's own order."""
    groups: list[str] = []
    for item in items:
        if group_of(item) not in groups:
            groups.append(group_of(item))
    rank = {g: i for i, g in enumerate(order(groups, seconds, workers))}
    placed = {}
    for item in items:
        group, stem = group_of(item), item.path.stem
        within = NODE_1_FILES.index(stem) if group == NODE_1_GROUP else 0
        placed[id(item)] = (rank[group], within)
    return placed


def workers(environ: Mapping[str, str] = os.environ) -> int:
    """The session's xdist workers (4, make test's default, where unknown)."""
    try:
        return int(environ.get(WORKERS_ENV, "4"))
    except ValueError:
        return 4


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
