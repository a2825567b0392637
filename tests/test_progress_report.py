"""A progress report checked and bounded into status.progress, and how it reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddp_operator.decide import progress_report as pr

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_a_report_becomes_status_progress() -> None:
    got = pr.normalize(
        {"step": 42, "total": 120, "etaSeconds": 190, "attempt": 1, "metrics": {"loss": 0.5}}, NOW
    )
    assert got == {
        "step": 42,
        "total": 120,
        "percent": 35.0,
        "etaSeconds": 190,
        "eta": "3m10s",
        "attempt": 1,
        "metrics": {"loss": 0.5},
        "updated": "2026-11-25T12:00:00.000Z",
    }
    done = pr.normalize({"step": 130, "total": 120, "etaSeconds": 5}, NOW)
    assert done["percent"] == 100.0 and done["eta"] == "0s"
    assert done["step"] == 120 and pr.complete(done)  # past total: clamped, reads as done
    assert "percent" not in pr.normalize({"step": 3}, NOW)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "JSON object"),
        ({}, "step is required"),
        ({"step": -1}, "step must be"),
        ({"step": 1.5}, "step must be"),
        ({"step": True}, "step must be"),
        ({"step": 1, "total": 0}, "total must be"),
        ({"step": 1, "metrics": {"a b": 1}}, "'a b' is no metric name"),
        ({"step": 1, "metrics": {"loss": float("nan")}}, "metrics.loss must be a finite"),
        ({"step": 1, "metrics": {"loss": "1"}}, "metrics.loss must be a finite"),
        ({"step": 1, "metrics": {f"m{i}": i for i in range(9)}}, "at most 8"),
    ],
)
def test_bad_reports_are_refused_naming_the_field(payload: object, field: str) -> None:
    with pytest.raises(pr.BadReport, match=field):
        pr.normalize(payload, NOW)


def test_durations() -> None:
    assert [pr.duration(s) for s in (0, 59, 60, 190, 3600, 7500, 90000)] == [
        "0s", "59s", "1m", "3m10s", "1h", "2h5m", "1d1h"
    ]  # fmt: skip


def test_summary_says_stale_on_a_running_job_only() -> None:
    p = pr.normalize({"step": 5, "total": 10, "etaSeconds": 60, "metrics": {"loss": 0.25}}, NOW)
    assert pr.summary(p, "Running", NOW) == "50.0% (step 5/10)  eta 1m  loss=0.25"
    later = NOW + timedelta(minutes=6)
    assert pr.summary(p, "Running", later).endswith("STALE: last report 6m ago")
    assert pr.summary(p, "Succeeded", later) == "50.0% (step 5/10)  loss=0.25"
    assert pr.summary(None, "Running", NOW) == "no report"


def test_a_patch_leaves_exactly_the_new_report() -> None:
    old = pr.normalize({"step": 1, "total": 9, "etaSeconds": 8, "metrics": {"a": 1, "b": 2}}, NOW)
    new = pr.normalize({"step": 2, "metrics": {"b": 3}}, NOW)
    patch = pr.merge_patch(old, new)
    assert patch["metrics"] == {"a": None, "b": 3.0}
    assert patch["total"] is None and patch["eta"] is None and patch["step"] == 2


def test_a_report_alone_leaves_the_loop_asleep() -> None:
    job = {"metadata": {"generation": 1, "resourceVersion": "1"}, "spec": {"nodes": 2}}
    reported = {
        **job,
        "metadata": {"generation": 1, "resourceVersion": "2"},
        "status": {"progress": {"step": 1}},
    }
    assert pr.same_but_progress(job, reported)
    assert not pr.same_but_progress(job, {**reported, "status": {"phase": "Running"}})
    assert not pr.same_but_progress(job, {**job, "spec": {"nodes": 3}})


def test_at_most_one_write_an_interval_but_the_first_complete_report_at_once() -> None:
    half = pr.normalize({"step": 5, "total": 10}, NOW)
    done = pr.normalize({"step": 10, "total": 10}, NOW)
    past = pr.normalize({"step": 11, "total": 10}, NOW)
    assert pr.write_in(float("inf"), 5.0, half, False) == 0.0  # the first write
    assert pr.write_in(1.0, 5.0, half, False) == 4.0
    assert pr.write_in(1.0, 5.0, done, False) == 0.0  # the first complete one: at once
    assert pr.write_in(1.0, 5.0, done, True) == 4.0  # the next ones wait like any other
    assert pr.write_in(1.0, 5.0, past, True) == 4.0  # a step past total too
    assert not pr.complete(pr.normalize({"step": 10}, NOW))  # no total: never complete


def test_the_attempt_s_clock_is_carried_from_report_to_report() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def taken(step: int, seconds: int, attempt: int = 0) -> dict:
        return pr.normalize({"step": step, "attempt": attempt}, t0 + timedelta(seconds=seconds))

    first = pr.carry(None, taken(10, 0))
    assert (first["since"], first["sinceStep"], first["advanced"]) == (
        first["updated"],
        10,
        first["updated"],
    )
    assert "stepSeconds" not in first
    second = pr.carry(first, taken(20, 30))
    assert second["advanced"] == second["updated"] and second["stepSeconds"] == 3.0
    same = pr.carry(second, taken(20, 90))  # the step did not move: its clock stays
    assert same["advanced"] == second["advanced"] and same["stepSeconds"] == 3.0
    again = pr.carry(same, taken(0, 100, attempt=1))  # a new attempt starts afresh
    assert again["advanced"] == again["since"] == again["updated"] and again["sinceStep"] == 0


def test_a_report_s_time_has_milliseconds_so_that_a_step_of_half_a_second_is_timed_right() -> None:
    """20 steps of 0.5 s, timed by whole seconds, read 0.47 s a step (S9, 2026-11-27)."""
    t0 = datetime(2026, 11, 27, 12, 0, 0, 900_000, tzinfo=UTC)
    first = pr.carry(None, pr.normalize({"step": 21}, t0))
    later = pr.normalize({"step": 40}, t0 + timedelta(seconds=9.5))
    assert first["updated"] == "2026-11-27T12:00:00.900Z"
    assert pr.carry(first, later)["stepSeconds"] == 0.5


def test_a_report_without_a_step_never_moves_the_step_nor_opens_the_attempt_s_clock() -> None:
    """Issue 68: a stepless report (Kubeflow's start, a percentage alone: it carries the step
    the job knew) keeps the clock of its attempt, or, the first of a new attempt, starts only
    its stall clock (``advanced``); the attempt's first real step opens its step interval."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def taken(step: int, seconds: int, attempt: int, **more: object) -> dict:
        payload = {"step": step, "attempt": attempt, "protocol": "kubeflow", **more}
        return pr.normalize(payload, t0 + timedelta(seconds=seconds))

    before = pr.carry(pr.carry(None, taken(0, 0, 0)), taken(520, 520, 0))
    assert (before["sinceStep"], before["stepSeconds"]) == (0, 1.0)
    same = pr.carry(before, taken(520, 530, 0, stepless=True))
    assert same == {**before, "updated": same["updated"]}  # nothing moved but the time taken
    start = pr.carry(before, taken(520, 600, 1, stepless=True))
    assert start["advanced"] == start["updated"] and start["protocol"] == "kubeflow"
    assert not {"since", "sinceStep", "stepSeconds", "stepless"} & set(start)
    first = pr.carry(start, taken(501, 730, 1))
    assert (first["since"], first["sinceStep"], first["advanced"]) == (
        first["updated"],
        501,
        first["updated"],
    )
    assert pr.carry(first, taken(502, 860, 1))["stepSeconds"] == 130.0
    phased = pr.normalize({"step": 5, "stepless": True, "phase": "eval"}, t0)
    assert "stepless" not in phased  # a phase is news: its report is no stepless one


def test_the_protocol_a_report_came_by_is_kept_and_checked() -> None:
    assert pr.normalize({"step": 1, "protocol": "kubeflow"}, NOW)["protocol"] == "kubeflow"
    assert "protocol" not in pr.normalize({"step": 1}, NOW)
    with pytest.raises(pr.BadReport, match="protocol must be one of kubeflow"):
        pr.normalize({"step": 1, "protocol": "mine"}, NOW)
