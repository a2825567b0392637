"""The kopf wiring's settings (act/handlers.py)."""

from __future__ import annotations

import itertools

import kopf

from ddp_operator.act.handlers import RetryForever


def test_kopf_s_requests_retry_for_as_long_as_the_api_server_is_away() -> None:
    """kopf reads the backoffs afresh for every request and gives up when they end; a watch that
    gives up stopped the operator after 54 s of outage (run 46 of the tests page)."""
    backoffs = RetryForever()
    settings = kopf.OperatorSettings()
    settings.networking.error_backoffs = backoffs
    first = list(itertools.islice(settings.networking.error_backoffs, 1000))
    again = list(itertools.islice(backoffs, 1000))
    assert first == again and len(first) == 1000  # every request gets the whole sequence
    assert first[:8] == [1, 1, 2, 3, 5, 8, 13, 21] and max(first) == 30
    assert sum(first[:20]) > 5 * 60  # five minutes away within 20 tries, then on
