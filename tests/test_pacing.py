"""How soon a job's loop plans again (``decide.pacing``): small jobs at once, costly passes
spaced so that planning takes at most a tenth of the time, never more than the cap."""

from __future__ import annotations

import pytest

from ddp_operator.decide import pacing


def test_a_cheap_pass_waits_only_for_the_burst_of_events_to_land():
    assert pacing.settle(0.0) == pacing.SETTLE_SECONDS
    assert pacing.settle(0.002) == pacing.SETTLE_SECONDS  # a pass of a job of 64 workers


def test_a_costly_pass_is_followed_by_nine_times_its_cost_so_planning_takes_a_tenth():
    spent = 0.1  # a pass of a job of 4096 workers, about
    wait = pacing.settle(spent)
    assert wait == pytest.approx(0.9)
    assert spent / (spent + wait) == pytest.approx(pacing.SHARE)


def test_the_wait_is_capped_so_that_a_change_is_acted_on_within_two_seconds():
    assert pacing.settle(5.0) == pacing.MAX_SETTLE_SECONDS == 2.0
