"""Where a quiet rank stands (``progress_stacks``), against a real HTTP server here: once a
rank has not called ``report`` for a while, or (a script that never calls it) has used no CPU
for a while, it sends its main thread's stack, once per quiet spell, from any rank; a rank that
keeps calling, or computing, sends nothing."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import plain_pickle
import pytest
from test_progress import Endpoint, endpoint  # noqa: F401 (the fixture)

from ddp_operator import progress, progress_stacks
from ddp_operator.decide import culprit
from ddp_operator.model import constants as c

from harness import pylibs

OPERATOR = Path(__file__).resolve().parents[1] / "operator"
TORCH_DATA = Path(__file__).parent / "data" / "torch"  # h200-*: recorded on a GPU (README)


def stand_here(seconds: float) -> None:
    """The main thread stands in here, as a hung script's does in its own code."""
    time.sleep(seconds)


def stacks(got: list[dict]) -> list[dict]:
    return [g for g in got if "stack" in g]


def test_a_quiet_rank_says_where_its_main_thread_stands_once_a_spell(
    endpoint: Endpoint,  # noqa: F811
    monkeypatch,
) -> None:
    monkeypatch.setattr(progress_stacks, "POLL", 0.05)
    monkeypatch.setenv("DDP_STACK_AFTER", "0.3")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("DDP_ATTEMPT", "4")
    r = progress.Reporter(endpoint.url, None, interval=0)
    for step in range(5):  # calling often: nothing
        r.report(step, 10)
        time.sleep(0.1)
    assert stacks(endpoint.got) == []
    stand_here(1.0)
    said = stacks(endpoint.got)
    assert len(said) == 1 and said[0]["attempt"] == 4, said
    stack = said[0]["stack"]
    assert stack["rank"] == 1 and stack["quietSeconds"] >= 0
    assert stack["frames"][-1].startswith("tests/test_progress_stacks.py:"), stack
    assert stack["frames"][-1].endswith(" stand_here"), stack
    assert endpoint.got == said  # rank 1 reports no progress
    r.report(6, 10)  # it advances: the next spell says again
    stand_here(1.0)
    assert len(stacks(endpoint.got)) == 2


def test_a_rank_is_quiet_after_three_of_its_usual_gaps_and_never_under_15_s() -> None:
    watch = progress_stacks.StackWatch(lambda: 0, lambda payload: True)
    assert watch.after() == progress_stacks.LEAST_QUIET == 15
    watch._gaps = [10.0, 12.0, 11.0]
    assert watch.after() == 33.0


RANKS = textwrap.dedent("""
    import json, os, sys, threading, time
    import torch, torch.distributed as dist
    from ddp_operator import progress_stacks
    dist.init_process_group(
        "gloo", init_method=os.environ["STORE"], rank=int(os.environ["RANK"]), world_size=2
    )
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    def say():  # once rank 0 is in its fourth all_reduce, rank 1 past its third
        want = {"entered": 4, "completed": 3} if dist.get_rank() == 0 else {"completed": 3}
        deadline, said = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            said = progress_stacks.collectives()
            if said and want.items() <= said[0].items():
                break
            if said and said[0]["entered"] == 4:  # its third may stay unmarked: the test
                deadline = min(deadline, time.monotonic() + 5)
            time.sleep(0.05)  # gloo's work thread marks a collective completed just after
        print(json.dumps(said), flush=True)
        if dist.get_rank() == 0:
            os._exit(0)
    threading.Thread(target=say, daemon=True).start()
    if dist.get_rank() == 1:
        time.sleep(120)  # hung: never joins the fourth; alive until rank 0 has said (the test)
    dist.all_reduce(t)
""")


def test_a_rank_says_where_it_stands_in_its_collectives_from_torch_s_flight_recorder(
    tmp_path: Path,
) -> None:
    """Two real gloo ranks: rank 0 entered all_reduce #4 and waits, rank 1 never did. They
    meet through a file, not a port another test may take between its choice and its use."""
    assert progress_stacks.collectives() == []  # torch.distributed not in use here
    env = {
        **os.environ,
        "STORE": f"file://{tmp_path}/store",
        "TORCH_FR_BUFFER_SIZE": "2000",
    }
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANKS],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        # Rank 1 stays: had it ended, rank 0's all_reduce would have failed ("Connection reset").
        out, err = ranks[0].communicate(timeout=120)
        assert ranks[0].returncode == 0, err
        assert ranks[1].stdout is not None
        said = [json.loads(out.strip().splitlines()[-1]), json.loads(ranks[1].stdout.readline())]
    finally:
        for p in ranks:
            p.kill()
            p.communicate()
    # Torch marks a gloo collective completed on its work thread after the caller has gone on
    # (here: 1 in 5 all_reduces read one behind, for up to 24 ms; in run 55 of the tests page,
    # rank 0's third still unmarked 60 s into its fourth; in the CI of 23ec7d8, its second and
    # third both, 5 s in). So "completed" is only ever behind: what names the culprit
    # (``decide.culprit``) holds however far: rank 0 is in a collective (entered > completed)
    # that rank 1 never entered.
    [waiting] = said[0]
    assert waiting["completed"] in (1, 2, 3), said
    assert waiting | {"completed": 3} == {
        "group": "default_pg",
        "entered": 4,
        "completed": 3,
        "op": "all_reduce",
    }, said
    # The same for rank 1's third (CI of 3528c24: read one behind): it entered 3, never the 4th.
    [standing] = said[1]
    assert standing["completed"] in (1, 2, 3), said
    assert (standing["group"], standing["entered"]) == ("default_pg", 3), said


BY_CPU = textwrap.dedent("""
    import sys, time
    from ddp_operator import progress, progress_stacks
    progress_stacks.POLL = 0.05
    progress_stacks._in_group = lambda: True  # as a rank that joined its group
    progress_stacks.autostart(progress.rank, progress.send_stack)
    def stand_here(seconds):
        time.sleep(seconds)
    def busy(seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sum(i * i for i in range(1000))
    def step(what):
        print(what, flush=True)
        sys.stdin.readline()  # the test has looked
    busy(1.0)
    step("computed")
    stand_here(1.0)
    step("stood")
    busy(0.5)
    step("moved")
    progress_stacks._reports.set()  # the script reports after all: its calls say from now on
    time.sleep(0.2)
    busy(0.2)
    stand_here(1.0)
""")


def test_a_rank_of_a_script_that_never_reports_says_where_it_stands_once_its_cpu_is_quiet(
    endpoint: Endpoint,  # noqa: F811
) -> None:
    """By its CPU time, in a process of its own (as a rank; the endpoint's work here is not
    its): computing, nothing; quiet, once a spell; computing again, that it moves (or its
    stack would stand for it while it computes); a report call ends it."""
    env = {
        **os.environ,
        "PYTHONPATH": str(OPERATOR),
        progress_stacks.URL_ENV: endpoint.url,
        "DDP_STACK_AFTER": "0.3",
        "RANK": "2",
    }
    rank = subprocess.Popen(
        [sys.executable, "-c", BY_CPU],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert rank.stdin is not None and rank.stdout is not None
    try:
        assert rank.stdout.readline() == "computed\n"
        assert stacks(endpoint.got) == []
        rank.stdin.write("\n")
        rank.stdin.flush()
        assert rank.stdout.readline() == "stood\n"
        said = stacks(endpoint.got)
        assert len(said) == 1 and said[0]["stack"]["rank"] == 2, said
        assert said[0]["stack"]["frames"][-1].endswith(" stand_here"), said
        rank.stdin.write("\n")
        rank.stdin.flush()
        assert rank.stdout.readline() == "moved\n"
        deadline = time.monotonic() + 10  # (the watch's thread posts it as it sees the work)
        while len(stacks(endpoint.got)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        moving = [g["stack"] for g in stacks(endpoint.got)[1:2]]
        assert moving == [{"rank": 2, "frames": [], "moving": True}], endpoint.got
        rank.stdin.write("\n")
        rank.stdin.flush()
        _, err = rank.communicate(timeout=30)
        assert rank.returncode == 0, err
    finally:
        rank.kill()
    # (standing in the test's readline after "moved" may be a new spell: one more stack)
    kinds = ["moving" if g["stack"].get("moving") else "stack" for g in stacks(endpoint.got)]
    assert kinds in (["stack", "moving"], ["stack", "moving", "stack"]), endpoint.got


def test_a_rank_is_quiet_by_cpu_as_its_pod_s_watch_judges_a_pod() -> None:
    assert progress_stacks.QUIET_SHARE * 100 == c.QUIET_PERCENT
    assert progress_stacks.URL_ENV == progress.URL_ENV


def test_outside_a_ddpjob_s_pod_no_process_is_watched(monkeypatch) -> None:
    monkeypatch.delenv(progress_stacks.URL_ENV, raising=False)

    def watches() -> set[int | None]:
        return {t.ident for t in threading.enumerate() if t.name == "ddp-stack"}

    before = watches()
    progress_stacks.autostart(progress.rank, progress.send_stack)
    assert watches() <= before


UNMODIFIED = textwrap.dedent("""
    import os, time
    import torch, torch.distributed as dist
    dist.init_process_group(
        "gloo", init_method=os.environ["STORE"], rank=int(os.environ["RANK"]), world_size=2
    )
    t = torch.ones(4); time.sleep(8 if os.environ.get("LATE") == os.environ["RANK"] else 0)
    for _ in range(3):
        dist.all_reduce(t)
    if dist.get_rank() == 1:
        time.sleep(120)  # hung: never joins the fourth
    if os.environ.get("SPIN") == str(dist.get_rank()):  # a thread keeps a core busy meanwhile
        import threading
        def spin():  # busy, taking no memory
            while True:
                pass
        threading.Thread(target=spin, daemon=True).start()
    dist.all_reduce(t)
""")


def unmodified_ranks(to: Endpoint, tmp_path: Path, **env: str) -> list[subprocess.Popen]:
    """Ranks 0 and 1 of UNMODIFIED, watched through the delivered helpers, reporting ``to``,
    with ``env``."""
    script = tmp_path / "train.py"
    script.write_text(UNMODIFIED)
    # The helpers first, as the operator delivers them: their sitecustomize starts the watch.
    path = os.pathsep.join([str(pylibs.helpers()), str(OPERATOR), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "STORE": f"file://{tmp_path}/store",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "DDP_PROGRESS_URL": to.url,
        "DDP_STACK_AFTER": "2",
        "DDP_ATTEMPT": "0",
        **env,
    }
    return [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            env={**env, "RANK": str(r)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]


def test_two_real_ranks_of_an_unmodified_script_name_the_one_that_hung(
    endpoint: Endpoint,  # noqa: F811
    tmp_path,
) -> None:
    """The trainer image's .pth starts the watch in each rank of a script with no progress
    code; their stacks name rank 1, and the all_reduce it never joined. Rank 0 starts 8 s late:
    rank 1 first waits for it in all_reduce #1 and says so; once that collective ends, its
    next quiet spell (asleep) is a new one, said at once."""
    (tmp_path / "dumps").mkdir()
    dumps = f"{tmp_path}/dumps/comm_lib_trace_rank_"
    ranks = unmodified_ranks(endpoint, tmp_path, TORCH_FR_DUMP_TEMP_FILE=dumps, LATE="0")
    now = datetime.now(UTC)

    def latest() -> dict[int, dict]:
        return {
            r: culprit.normalize(g["stack"], r, 2, f"w-{r}", now)
            for g in stacks(endpoint.got)
            if (r := g["stack"]["rank"]) is not None
        }

    try:
        deadline = time.monotonic() + 90
        while getattr(culprit.named(latest(), None), "rank", None) != 1:  # (rank 0 at first)
            assert time.monotonic() < deadline, endpoint.got
            assert all(p.poll() is None for p in ranks), [p.communicate() for p in ranks]
            time.sleep(0.2)
    finally:
        for p in ranks:
            p.kill()
            p.communicate()
    kept = latest()
    assert all(g["attempt"] == 0 for g in stacks(endpoint.got))
    said = [g["stack"] for g in stacks(endpoint.got) if g["stack"]["rank"] == 1]
    assert [(c["entered"], c["completed"]) for c in said[0]["collectives"]] == [(1, -1)], said
    assert said[-1]["quietSeconds"] < progress_stacks.RESEND, said  # a new spell, not a repeat
    hung = culprit.named(kept, None)
    assert hung is not None and hung.rank == 1, kept
    assert "never joined all_reduce #4 (default_pg): it stood at " in hung.words, hung.words
    assert f"{tmp_path.name}/train.py:11 in <module>; rank 0 waits there at " in hung.words
    # With its first stack, each wrote its recorder's dump where torch would on a timeout: the
    # same facts, kept for torch's analyser (read here as plain data only).
    for r in (0, 1):
        data = (tmp_path / "dumps" / f"comm_lib_trace_rank_{r}").read_bytes()
        dumped = progress_stacks.summarize(plain_pickle.load(data))
        entered = [(c["group"], c["entered"], c["op"]) for c in kept[r]["collectives"]]
        assert [(c["group"], c["entered"], c["op"]) for c in dumped] == entered, (dumped, kept)
    assert sorted(os.listdir(tmp_path / "dumps")) == [
        "comm_lib_trace_rank_0",
        "comm_lib_trace_rank_1",
    ]


def test_an_nccl_rank_s_recorder_says_the_collective_it_waits_in_as_its_dump_does() -> None:
    """On an H200 (torch 2.11, NCCL), a collective stuck behind a kernel that never ends: the
    recorder's JSON, read live by the rank's watch, and the dump torch wrote on the collective's
    timeout agree: all_reduce #4 entered, #3 the last completed, called at train.py:15."""
    live = json.loads((TORCH_DATA / "h200-fr-nccl-active.json").read_text())
    dumped = plain_pickle.load((TORCH_DATA / "h200-fr-dump-rank-0").read_bytes())
    said = [{"group": "default_pg", "entered": 4, "completed": 3, "op": "all_reduce"}]
    assert progress_stacks.summarize(live) == said
    assert progress_stacks.summarize(dumped) == said
    stuck = next(e for e in dumped["entries"] if e["collective_seq_id"] == 4)
    assert (stuck["state"], stuck["frames"][-1]["line"]) == ("scheduled", 15)
    with pytest.raises(pickle.UnpicklingError, match=r"posix\.system: not plain data"):
        plain_pickle.load(pickle.dumps(os.system))


def test_a_rank_waiting_in_a_collective_says_so_though_its_cpu_is_busy(
    endpoint: Endpoint,  # noqa: F811
    tmp_path,
) -> None:
    """As an NCCL rank spins a core while it waits (seen on an H200): rank 0 waits in gloo's
    all_reduce #4 while a thread of it keeps a core busy; its flight recorder, not its CPU,
    says it stands still, and its stack goes."""
    ranks = unmodified_ranks(endpoint, tmp_path, SPIN="0")
    try:
        deadline = time.monotonic() + 90
        while not [g for g in stacks(endpoint.got) if g["stack"]["rank"] == 0]:
            assert time.monotonic() < deadline, endpoint.got
            assert all(p.poll() is None for p in ranks), [p.communicate() for p in ranks]
            time.sleep(0.2)
        busy = cpu_seconds(ranks[0].pid)
        time.sleep(1.0)
        busy = cpu_seconds(ranks[0].pid) - busy
    finally:
        for p in ranks:
            p.kill()
            p.communicate()
    assert busy > progress_stacks.QUIET_SHARE, busy  # by its CPU alone, never quiet
    mine = next(g["stack"] for g in stacks(endpoint.got) if g["stack"]["rank"] == 0)
    # (gloo's recorder may mark #3 completed late, while the busy thread holds the interpreter)
    (said,) = mine["collectives"]
    assert (said["group"], said["entered"], said["op"]) == ("default_pg", 4, "all_reduce"), mine
    assert said["completed"] < 4, mine


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
