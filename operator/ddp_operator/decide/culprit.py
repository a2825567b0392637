"""The rank that hung, from where each rank stood (``progress_stacks``: a rank quiet for a while
sends its main thread's Python stack). In synchronous DDP a hang is one rank that never joins a
collective the others wait in: the ranks whose innermost frame is torch's (a collective, or a
backward pass whose gradients' all_reduce waits) wait; a rank whose innermost frame is the
script's own (a sleep, a deadlock, a loop) stands outside, and is the one that hung. Pure:
plain data in (never a tenant's pickle), words and a worker index out.

With a stack may come where the rank stands in each process group's collectives (torch's flight
recorder, read in the rank's own process): the one the waiting ranks entered and the hung rank
never did is then named, with its sequence number and group.

A stack is taken only from the job's own pod of the current attempt (``progress_desk``), kept
in the operator's memory (lost with it: a restarted operator names nobody until the ranks speak
again), and counts only if it was sent after the training last advanced.

A rank is the one torchrun gave, not one the operator could derive from the pod's index: c10d's
rendezvous numbers nodes in the sorted order of their descriptors (host name first, so from 11
workers on ``-worker-10`` is node 2), and a round without a worker shifts the rest. So a stack is
taken for any rank of the job's world from any of its pods, each pod keeping at most its
processes' worth (its latest: ``keep``), and the worker named is the pod that sent it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .conditions import parse_time

MAX_FRAMES = 16
MAX_FRAME_CHARS = 256
MAX_RANK = 1 << 20
MAX_GROUPS = 8
MAX_NAME_CHARS = 64
MAX_SEQ = 1 << 62
MAX_QUIET = 1 << 31  # seconds


class BadStack(ValueError):
    """A stack report that is not one."""


@dataclass(frozen=True)
class Culprit:
    """The worker (index, pod) and rank that stood outside torch, and the words for the job."""

    index: int
    pod: str
    rank: int
    words: str


def normalize(raw: Any, worker: int, world: int, pod: str, now: datetime) -> dict[str, Any]:
    """A stack report as kept: ``{"rank", "worker", "pod", "frames", "at", "quietSeconds"}``
    (and ``collectives``, or ``moving``: the rank's quiet spell is over); raises BadStack.
    ``worker``, ``pod``: the sender pod's index and name; ``world``: the most ranks the job's
    world may have (any of them may be the sender's: torchrun numbers them)."""
    if not isinstance(raw, Mapping):
        raise BadStack("stack must be an object")
    rank, frames = raw.get("rank"), raw.get("frames")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < MAX_RANK:
        raise BadStack(f"stack.rank must be a rank, not {rank!r}")
    if rank >= world:
        raise BadStack(f"rank {rank} is not in the job's world of {world} ranks")
    if not isinstance(frames, list) or not all(isinstance(f, str) for f in frames):
        raise BadStack("stack.frames must be a list of strings")
    kept = [f[:MAX_FRAME_CHARS] for f in frames[-MAX_FRAMES:]]
    at = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    stack = {"rank": rank, "worker": worker, "pod": pod, "frames": kept, "at": at}
    quiet = raw.get("quietSeconds", 0)
    if not isinstance(quiet, int | float) or isinstance(quiet, bool) or not 0 <= quiet < MAX_QUIET:
        raise BadStack(f"stack.quietSeconds must be seconds, not {quiet!r}")
    stack["quietSeconds"] = int(quiet)
    if raw.get("moving") is True:  # its quiet spell is over: what it said of it is void
        stack["moving"] = True
    if (said := raw.get("collectives")) is not None:
        stack["collectives"] = _collectives(said)
    return stack


def keep(stacks: dict[int, dict[str, Any]], stack: dict[str, Any], procs: int) -> None:
    """Put a normalized ``stack`` in ``stacks`` (by rank): it replaces what any pod said of its
    rank before (the rank moved, or spoke again), and its pod keeps at most ``procs`` ranks, its
    latest (those it ran in an earlier round go). One that says its rank moves again
    (``moving``) takes what its pod said of the rank away, and is not kept."""
    if stack.get("moving"):
        if stacks.get(stack["rank"], {}).get("pod") == stack["pod"]:
            del stacks[stack["rank"]]
        return
    stacks[stack["rank"]] = stack
    pod = stack["pod"]
    mine = sorted((s["at"], r) for r, s in stacks.items() if s["pod"] == pod and s is not stack)
    for _, rank in mine[: max(0, len(mine) + 1 - max(1, procs))]:
        del stacks[rank]


def _collectives(raw: Any) -> list[dict[str, Any]]:
    """``stack.collectives`` as kept: at most MAX_GROUPS ``{"group", "entered", "completed",
    "op"}``; raises BadStack."""
    if not isinstance(raw, list):
        raise BadStack("stack.collectives must be a list")
    kept = []
    for c in raw[:MAX_GROUPS]:
        if not isinstance(c, Mapping):
            raise BadStack("stack.collectives[] must be objects")
        group, op = c.get("group"), c.get("op", "")
        seqs = [c.get("entered"), c.get("completed")]
        if not isinstance(group, str) or not isinstance(op, str):
            raise BadStack("stack.collectives[].group and .op must be strings")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in seqs) or not all(
            -1 <= n < MAX_SEQ for n in seqs
        ):
            raise BadStack("stack.collectives[].entered and .completed must be sequence numbers")
        kept.append(
            {
                "group": group[:MAX_NAME_CHARS],
                "entered": seqs[0],
                "completed": seqs[1],
                "op": op[:MAX_NAME_CHARS],
            }
        )
    return kept


def _never_joined(hung: Mapping[str, Any], waiting: Mapping[str, Any]) -> str | None:
    """The collective a waiting rank is in (entered, not completed) that the hung rank never
    entered, in words (``all_reduce #31 (default_pg)``); None where their recorders do not say."""
    entered = {c["group"]: c["entered"] for c in hung.get("collectives") or ()}
    for c in waiting.get("collectives") or ():
        seq, group = c["entered"], c["group"]
        if seq > c["completed"] and group in entered and entered[group] < seq:
            return f"{c['op'] or 'collective'} #{seq} ({group})"
    return None


# Where a rank waits for the others: a collective, a backward pass (DDP's all_reduce of the
# gradients), DDP's own broadcasts, a device synchronisation. A rank elsewhere in torch (its
# DataLoader, say) is not waiting for the others: it stands outside.
WAITS_IN = (
    "torch/distributed/",
    "torch/autograd/",
    "torch/_tensor.py",
    "torch/nn/parallel/",
    "torch/cuda/",
)


def in_torch(frame: str) -> bool:
    return frame.startswith("torch/")


def unknown(frames: list[str]) -> bool:
    """Whether a stack says nothing of the training: empty, or a main thread that only waits
    for another (``threading``'s join or wait: the training runs elsewhere)."""
    return not frames or frames[-1].split(":")[0].endswith("threading.py")


def waits(stack: Mapping[str, Any], latest: Mapping[str, int] | None = None) -> bool:
    """Whether a rank stands where it waits for the others: its innermost frame, or its flight
    recorder (a collective entered and not completed: under NCCL the script's own line, a
    ``.item()`` say, waits on the GPU for it; seen on an H200). Not a collective of a group in
    which another rank entered a later one (``latest``, by group): a rank behind the others
    stands outside whatever its last mark says (torch 2.15's gloo marked an all_reduce
    completed late, or never: a rank asleep in the script read as in it)."""
    frames = stack.get("frames") or []
    return in_collective(stack, latest) or (bool(frames) and frames[-1].startswith(WAITS_IN))


def in_collective(stack: Mapping[str, Any], latest: Mapping[str, int] | None = None) -> bool:
    """Whether a rank's flight recorder says it stands in a collective it entered and has not
    completed (not one of a group in which another rank entered a later one: ``latest``)."""
    ahead = latest or {}
    return any(
        c["entered"] > c["completed"] and c["entered"] >= ahead.get(c["group"], 0)
        for c in stack.get("collectives") or ()
    )


def _caller(frames: list[str]) -> str | None:
    """The script's frame that called into torch (``path:line``), if any."""
    outside = [f for f in frames if not in_torch(f)]
    return outside[-1].split(" ")[0] if outside else None


def _op(frames: list[str]) -> str:
    """The torch function a waiting rank stands in: its innermost public one (``all_reduce``,
    ``backward``; not a decorator's ``wrapper``)."""
    names = [f.rsplit(" ", 1)[-1] for f in frames if in_torch(f)]
    public = [n for n in names if not n.startswith("_") and n not in ("wrapper", "inner")]
    return public[-1] if public else "torch"


def named(stacks: Mapping[int, Mapping[str, Any]], since: datetime | None) -> Culprit | None:
    """The rank that stands outside while others wait in torch, among ``stacks`` (by rank)
    sent after ``since`` (the training's last advance); None unless exactly one worker's ranks
    stand outside and at least one rank waits."""
    fresh = {
        r: s
        for r, s in stacks.items()
        if not unknown(s.get("frames") or [])
        and (since is None or ((t := parse_time(s.get("at"))) is not None and t >= since))
    }
    latest: dict[str, int] = {}
    for s in fresh.values():
        for c in s.get("collectives") or ():
            latest[c["group"]] = max(latest.get(c["group"], 0), c["entered"])
    waiting = {r: s for r, s in fresh.items() if waits(s, latest)}
    outside = {r: s for r, s in fresh.items() if r not in waiting}
    if not waiting or not outside or len({s["worker"] for s in outside.values()}) != 1:
        return None
    rank = min(outside)
    s = outside[rank]
    where = s["frames"][-1].split(" ")
    ranks = ", ".join(str(r) for r in sorted(waiting))
    first = waiting[min(waiting)]
    others = first["frames"]
    at = f" at {caller}" if (caller := _caller(others)) else ""
    who = f"ranks {ranks} wait" if len(waiting) > 1 else f"rank {ranks} waits"
    if joined := _never_joined(s, first):
        words = (
            f"{s['pod']} (rank {rank}) never joined {joined}: it stood at {where[0]} in "
            f"{where[-1]}; {who} there{at}"
        )
    else:
        words = (
            f"{s['pod']} (rank {rank}) never joined the collective: it stood at {where[0]} in "
            f"{where[-1]}; {who} in {_op(others)}{at}"
        )
    return Culprit(int(s["worker"]), str(s["pod"]), rank, words)
