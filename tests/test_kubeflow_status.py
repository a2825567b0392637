"""Kubeflow Trainer's status updates (KEP-2779) read as our reports (``kubeflow_status``), as
Hugging Face transformers' KubeflowCallback (5.4+) sends them: at the start (the total only),
every 5 s (step, total, ETA, the logged metrics, every value a string) and at the end (100%,
ETA 0, the metrics: no step). Pure."""

from __future__ import annotations

import pytest

from ddp_operator.decide import kubeflow_status
from ddp_operator.decide.progress_report import BadReport


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
    assert start == {"step": 0, "total": 60, "metrics": {}}
    mid = update(41, 12, loss=0.5312, learning_rate=2e-05, grad_norm=1.25, epoch=0.41)
    mid["trainerStatus"]["metrics"] += [
        {"name": "current_step", "value": "25"},
        {"name": "total_steps", "value": "60"},
        {"name": "current_epoch", "value": "0.41"},
    ]
    got = kubeflow_status.as_report(mid, start)
    assert got == {
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
        "step": 60,
        "total": 60,
        "etaSeconds": 0,
        "metrics": {"loss": 0.3, "train_runtime": 14.2},
    }


def test_what_is_no_number_or_no_name_of_ours_is_left_out_and_eight_metrics_kept() -> None:
    names = {f"m{i}": i for i in range(10)}
    got = kubeflow_status.as_report(update(10, **names, **{"train/loss": 1, "note": "x"}), None)
    assert got is not None and list(got["metrics"]) == [f"m{i}" for i in range(8)]
    assert got["step"] == 0  # no total known: no step from a percentage


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
