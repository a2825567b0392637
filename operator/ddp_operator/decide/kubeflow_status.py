"""Kubeflow Trainer's progress protocol (KEP-2779), as Hugging Face transformers'
``KubeflowCallback`` (transformers 5.4+) speaks it, read as one of our reports: a script that
reports to a TrainJob reports to its DDPJob, unchanged. Pure.

The callback switches itself on when ``KUBEFLOW_TRAINER_SERVER_URL`` is set (``progress_pod``
sets it, with ``KUBEFLOW_TRAINER_SERVER_TOKEN``, the file of the pod's own progress token) and
posts, from the world's process 0, at most every 5 s and at the training's start and end::

    {"trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 310,
     "metrics": [{"name": "loss", "value": "0.12"}, {"name": "current_step", "value": "420"},
                 {"name": "total_steps", "value": "1000"}], "lastUpdatedTime": "..."}}

Every metric value is a string. ``current_step`` and ``total_steps`` are the step and the total;
the other numeric metrics are kept, the first MAX_METRICS of them that are metric names of ours.
A status without ``trainerStatus`` says nothing.

An update without ``current_step`` says no step: the start's (progress 0, the total only: sent
before a resumed attempt has loaded its checkpoint, so its 0 is no step of the training) and
one with a percentage only. Its report keeps the step the job knows and is marked ``stepless``:
it never moves the step nor opens the attempt's clock (``progress_report.carry``). The end's
(100%, no step) is the one exception: the training is done, its step the total the job knows.
Every report is marked ``protocol: kubeflow``: such a script cannot announce a phase, so a long
stretch without steps while its processes compute (an evaluation) is judged by them (``quiet``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..model import constants as c
from .progress_report import MAX_METRICS, MAX_STEP, METRIC_NAME, BadReport

ROUTE = c.KUBEFLOW_STATUS_ROUTE
STEP, TOTAL = "current_step", "total_steps"
PROTOCOL = "kubeflow"  # ``status.progress.protocol`` of its reports


def _number(name: str, value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _count(name: str, value: float | None) -> int | None:
    if value is None:
        return None
    if not 0 <= value <= MAX_STEP or value != int(value):
        raise BadReport(f"trainerStatus.metrics {name} must be a whole number, not {value!r}")
    return int(value)


def as_report(payload: Any, before: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Our report (``progress_report.normalize``'s input) from a Kubeflow status update, the
    job's last report being ``before``; None where it says nothing; BadReport naming the
    field."""
    if not isinstance(payload, Mapping):
        raise BadReport("a status update is a JSON object")
    status = payload.get("trainerStatus")
    if status is None:
        return None
    if not isinstance(status, Mapping):
        raise BadReport("trainerStatus must be an object")
    raw = status.get("metrics") or []
    if not isinstance(raw, list) or not all(isinstance(m, Mapping) for m in raw):
        raise BadReport("trainerStatus.metrics must be a list of {name, value}")
    values = {str(m.get("name")): _number(str(m.get("name")), m.get("value")) for m in raw}
    step, total = _count(STEP, values.pop(STEP, None)), _count(TOTAL, values.pop(TOTAL, None))
    before = before or {}
    total = total if total is not None else before.get("total")
    percent = status.get("progressPercentage")
    if percent is not None and (
        isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100
    ):
        raise BadReport(f"trainerStatus.progressPercentage must be 0 to 100, not {percent!r}")
    report: dict[str, Any] = {"protocol": PROTOCOL}
    if step is None and percent == 100 and total:  # the end's: done
        step = int(total)
    elif step is None:  # the start's, or a percentage only: no step, the percentage shown
        step = int(before.get("step") or 0)
        report["stepless"] = True
        if percent:
            report["percent"] = percent
    report["step"] = step
    if total:
        report["total"] = int(total)
    eta = status.get("estimatedRemainingSeconds")
    if isinstance(eta, int) and not isinstance(eta, bool) and eta >= 0:
        report["etaSeconds"] = eta
    kept = {k: v for k, v in values.items() if v is not None and METRIC_NAME.match(k)}
    report["metrics"] = dict(list(kept.items())[:MAX_METRICS])
    return report
