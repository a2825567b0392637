"""What a job loop takes of the job's events (``act/runner``): the resourceVersion its next
conditional status write is made on."""

from __future__ import annotations

from ddp_operator.act.runner import newer


def test_an_older_echo_does_not_move_the_version_back() -> None:
    """Issue 53: the loop took the version of any event, so the echo of a write older than the
    progress desk's latest made the loop's next status write conflict for nothing (a 409)."""
    assert newer("120", "118") == "120"  # an echo of an earlier write: kept
    assert newer("120", "125") == "125"  # a later change, ours or another's: taken
    assert newer(None, "7") == "7" and newer("7", None) == "7"
    assert newer("120", "opaque-v2") == "opaque-v2"  # not etcd's: taken as seen
