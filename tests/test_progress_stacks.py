"""Where a quiet rank stands (``progress_stacks``), against a real HTTP server here: once a
rank has not called ``report`` for a while, it sends its main thread's stack, once per quiet
spell, from any rank; a rank that keeps calling sends nothing."""

from __future__ import annotations

import time

from test_progress import Endpoint, endpoint  # noqa: F401 (the fixture)

from ddp_operator import progress, progress_stacks


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
