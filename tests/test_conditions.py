"""Unit tests of which status changes count as progress only (a job loop holds those back for
up to a second), using the planner's own statuses as workers come up, run and fail."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from ddp_operator.decide.conditions import progress_only
from ddp_operator.decide.reconcile import plan
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)
own = functools.partial(WorkerPod, owner_uid="u")


def status_with(pods: list[WorkerPod], status: dict | None = None, later: int = 0) -> dict:
    body = ddpjob("j", "ns", nodes=4)
    body["metadata"]["uid"] = "u"
    names = [f"j-worker-{p}" for p in range(4)]
    seen = {(n, 0) for n in names}
    return plan(
        resolve(body), status or {}, pods, NOW + timedelta(seconds=later), 1, None, seen
    ).status


def pods(*phases: str) -> list[WorkerPod]:
    return [own(name=f"j-worker-{i}", index=i, attempt=0, phase=ph) for i, ph in enumerate(phases)]


def test_more_workers_running_is_progress_only() -> None:
    one = status_with(pods("Running", "Pending", "Pending", "Pending"))
    two = status_with(pods("Running", "Running", "Pending", "Pending"), one, later=1)
    assert two["workers"] != one["workers"]
    assert progress_only(one, two)


def test_all_running_a_failure_or_no_change_is_not() -> None:
    three = status_with(pods("Running", "Running", "Running", "Pending"))
    four = status_with(pods("Running", "Running", "Running", "Running"), three, later=1)
    failed = status_with(pods("Running", "Failed", "Running", "Running"), three, later=1)
    assert four["phase"] != three.get("phase") or four["conditions"] != three["conditions"]
    assert not progress_only(three, four)  # the job's standing changed: written at once
    assert not progress_only(three, failed)
    assert not progress_only(three, dict(three))  # nothing changed: nothing to write


def test_a_new_generation_is_not_progress() -> None:
    one = status_with(pods("Running", "Pending", "Pending", "Pending"))
    again = {**one, "observedGeneration": 2}
    assert not progress_only(one, again)


def test_another_conditions_message_is_not_progress() -> None:
    """Which pod a condition such as ContainersNotStarting names is news: written at once."""
    old = {
        "conditions": [
            {
                "type": "ContainersNotStarting",
                "status": "True",
                "reason": "X",
                "message": "j-worker-1: cannot start",
            }
        ]
    }
    new = {"conditions": [{**old["conditions"][0], "message": "j-worker-0: cannot start"}]}
    assert not progress_only(old, new)
    counting = {
        "conditions": [
            {
                "type": "Created",
                "status": "False",
                "reason": "Creating",
                "message": "1 of 4 workers exist",
            }
        ]
    }
    more = {"conditions": [{**counting["conditions"][0], "message": "3 of 4 workers exist"}]}
    assert progress_only(counting, more)
