"""Kubeflow Trainer's status updates (KEP-2779) read as our reports (``kubeflow_status``), as
Hugging Face transformers' KubeflowCallback (5.4+) sends them: at the start (the total only),
every 5 s (step, total, ETA, the logged metrics, every value a string) and at the end (100%,
ETA 0, the metrics: no step). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddp_operator.decide import hangs, kubeflow_status, progress_report
from ddp_operator.decide.progress_report import BadReport
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def update(percent=None, eta=None, **metrics) -> dict:
    status = {"lastUpdatedTime": "2026-11-27T12:00:00.123456+00:00"}
    if percent is not None:
        status["progressPercentage"] = percent
    if eta is not None:
        status["estimatedRemainingSeconds"] = eta
    if metrics:
        status["metrics"] = [{"name": k, "value": str(v)} for k, v in metrics.items()]
    return {"trainerStatus": status}


def test_the_start_the_steps_and_the_end_of_a_hugging_face_trainer() -> None:
    start = kubeflow_status.as_report(update(0, total_steps=60), None)
    kubeflow = {"protocol": "kubeflow"}
    assert start == {**kubeflow, "step": 0, "stepless": True, "total": 60, "metrics": {}}
    mid = update(41, 12, loss=0.5312, learning_rate=2e-05, grad_norm=1.25, epoch=0.41)
    mid["trainerStatus"]["metrics"] += [
        {"name": "current_step", "value": "25"},
        {"name": "total_steps", "value": "60"},
        {"name": "current_epoch", "value": "0.41"},
    ]
    got = kubeflow_status.as_report(mid, start)
    assert got == {
        **kubeflow,
        "step": 25,
        "total": 60,
        "etaSeconds": 12,
        "metrics": {
            "loss": 0.5312,
            "learning_rate": 2e-05,
            "grad_norm": 1.25,
            "epoch": 0.41,
            "current_epoch": 0.41,
        },
    }
    end = kubeflow_status.as_report(update(100, 0, loss=0.3, train_runtime=14.2), got)
    assert end == {
        **kubeflow,
        "step": 60,
        "total": 60,
        "etaSeconds": 0,
        "metrics": {"loss": 0.3, "train_runtime": 14.2},
    }


def test_what_is_no_number_or_no_name_of_ours_is_left_out_and_eight_metrics_kept() -> None:
    names = {f"m{i}": i for i in range(10)}
    got = kubeflow_status.as_report(update(10, **names, **{"train/loss": 1, "note": "x"}), None)
    assert got is not None and list(got["metrics"]) == [f"m{i}" for i in range(8)]
    assert got["step"] == 0 and got["stepless"]  # no step from a percentage


def test_an_update_without_trainer_status_says_nothing() -> None:
    assert kubeflow_status.as_report({}, None) is None


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ([], "a status update is a JSON object"),
        ({"trainerStatus": 3}, "trainerStatus must be an object"),
        ({"trainerStatus": {"metrics": "loss"}}, "trainerStatus.metrics must be a list"),
        (update(101), "progressPercentage must be 0 to 100"),
        (update(True), "progressPercentage must be 0 to 100"),
        (update(5, current_step=2.5), "current_step must be a whole number"),
        (update(5, total_steps=-1), "total_steps must be a whole number"),
    ],
)
def test_a_bad_update_is_refused_naming_the_field(payload: object, words: str) -> None:
    with pytest.raises(BadReport, match=words):
        kubeflow_status.as_report(payload, None)


def step_update(step: int, total: int, percent: int) -> dict:
    return update(percent, current_step=step, total_steps=total)


def test_a_start_or_a_percentage_alone_says_no_step() -> None:
    """Issue 68: the start of an attempt resumed at step 500 (progress 0, the total only) was
    read as step 0, and a percentage alone as a step; neither is one: the job keeps the step it
    knew, marked stepless. The end (100%) is the total: the training is done."""
    before = {"step": 520, "total": 1000, "attempt": 0}
    start = kubeflow_status.as_report(update(0, total_steps=1000), before)
    assert start is not None and (start["step"], start["stepless"]) == (520, True)
    alone = kubeflow_status.as_report(update(42), before)
    assert alone is not None and (alone["step"], alone["stepless"]) == (520, True)
    assert alone["percent"] == 42  # shown as the client said it
    end = kubeflow_status.as_report(update(100), before)
    assert end is not None and end["step"] == 1000 and "stepless" not in end


def test_a_resumed_attempt_of_130_s_steps_is_timed_from_its_first_real_step() -> None:
    """Issue 68's figures: attempt 1 resumes at step 500 of a job of 130 s steps. Its start's
    update, read as step 0, made the seconds per step 130 / 501 = 0.26, an automatic timeout of
    120 s and a stall before every next step. Read as no step, the attempt's clock opens at its
    first real step (501): no interval until the next, then 130 s a step; never stalled."""
    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    job = resolve(ddpjob("j", "ns", nodes=2))
    status = {
        "conditions": [
            {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-30T11:59:00Z"}
        ]
    }
    last = {"step": 520, "total": 1000, "attempt": 0, "since": "2026-11-30T10:00:00.000Z"}

    def taken(payload: dict, seconds: float, before: dict) -> dict:
        report = kubeflow_status.as_report(payload, before)
        assert report is not None
        new = progress_report.normalize({**report, "attempt": 1}, t0 + timedelta(seconds=seconds))
        return progress_report.carry(before, new)

    start = taken(update(0, total_steps=1000), 0, last)
    first = taken(step_update(501, 1000, 50), 130, start)
    stall, _ = hangs.check(job, status, first, 1, t0 + timedelta(seconds=130 + 129))
    assert stall is None  # the 300 s of an attempt with no interval yet, not 120 s
    second = taken(step_update(502, 1000, 50), 260, first)
    stall, _ = hangs.check(job, status, second, 1, t0 + timedelta(seconds=260 + 129))
    assert stall is None
    assert "since" not in start and "stepSeconds" not in start and start["attempt"] == 1
    assert (first["sinceStep"], "stepSeconds" in first) == (501, False)
    assert second["stepSeconds"] == 130.0 and hangs.timeout(job, second) == 390


def test_a_client_that_reports_percentages_only_moves_the_stall_clock_as_they_rise() -> None:
    """No step ever: its percentage is shown, and a percentage that rose moves the stall clock
    (``advanced``) without opening a step interval; one that did not, does not."""
    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in (0, 10, 20)]
    reports: list[dict] = []
    for when, percent in zip(t, (5, 7, 7), strict=True):
        raw = kubeflow_status.as_report(update(percent), reports[-1] if reports else None)
        new = progress_report.normalize({**raw, "attempt": 0}, when)
        reports.append(progress_report.carry(reports[-1] if reports else None, new))
    assert [r["percent"] for r in reports] == [5.0, 7.0, 7.0]
    assert [r["advanced"] for r in reports] == [reports[0]["updated"], *[reports[1]["updated"]] * 2]
    assert all("stepSeconds" not in r and r["step"] == 0 for r in reports), reports
