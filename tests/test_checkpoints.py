"""The job's checkpoint as its script says it (``checkpoints``): checked out of a report, kept
only when it moves, and handed on as where to resume. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ddp_operator.decide import checkpoints
from ddp_operator.decide.progress_report import BadReport
from ddp_operator.manifests import job_configmap
from ddp_operator.model import constants as c

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_report_s_checkpoint_is_stamped_with_the_attempt_and_time() -> None:
    got = checkpoints.of_report({"step": 12, "checkpoint": {"step": 10, "path": "/c/10"}}, 2, NOW)
    assert got == {"step": 10, "path": "/c/10", "attempt": 2, "time": "2026-11-27T12:00:00Z"}
    assert checkpoints.of_report({"step": 12}, 2, NOW) is None
    assert "path" not in (checkpoints.of_report({"checkpoint": {"step": 0}}, 0, NOW) or {})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("10", "checkpoint must be an object"),
        ({"path": "/c"}, "checkpoint.step must be an integer"),
        ({"step": -1}, "checkpoint.step must be an integer"),
        ({"step": True}, "checkpoint.step must be an integer"),
        ({"step": 1, "path": ""}, "checkpoint.path must be 1 to 1024 printable"),
        ({"step": 1, "path": "a\nb"}, "checkpoint.path must be 1 to 1024 printable"),
        ({"step": 1, "path": "x" * 1025}, "checkpoint.path must be 1 to 1024 printable"),
        ({"step": 1, "path": 7}, "checkpoint.path must be 1 to 1024 printable"),
    ],
)
def test_a_bad_checkpoint_is_refused_naming_the_field(raw: object, field: str) -> None:
    with pytest.raises(BadReport, match=field):
        checkpoints.of_report({"step": 1, "checkpoint": raw}, 0, NOW)


def test_only_a_new_step_or_path_moves_the_job_s_checkpoint() -> None:
    known = {"step": 10, "path": "/c/10", "attempt": 0, "time": "t0"}
    same = {"step": 10, "path": "/c/10", "attempt": 1, "time": "t1"}
    assert not checkpoints.moved(known, same)
    assert not checkpoints.moved(known, None)
    assert checkpoints.moved(known, {**same, "step": 20})
    assert checkpoints.moved(known, {"step": 10, "attempt": 1, "time": "t1"})  # its path gone
    assert checkpoints.moved(None, same)
    assert checkpoints.merge_patch({"step": 5}) == {"path": None, "step": 5}


def test_where_to_resume_is_in_the_job_s_configmap_from_the_first_checkpoint() -> None:
    assert checkpoints.resume_data(None) == {}
    assert checkpoints.resume_data({"step": 10, "path": "/c/10"}) == {
        c.ENV_RESUME_STEP: "10",
        c.ENV_RESUME_PATH: "/c/10",
    }
    data = job_configmap.data(2, "a,b", 3, checkpoints.resume_data({"step": 4}))
    assert data == {
        c.ENV_ATTEMPT: "3",
        "VC_WORKER_HOSTS.2": "a,b",
        c.ENV_RESUME_STEP: "4",
        c.ENV_RESUME_PATH: "",
    }


def test_a_restart_resumes_from_the_newest_checkpoint_written_or_taken() -> None:
    written = {"step": 10, "time": "2026-11-27T12:00:00Z"}
    taken = {"step": 20, "time": "2026-11-27T12:00:05Z"}
    assert checkpoints.latest(written, taken) == taken
    assert checkpoints.latest(taken, written) == taken
    assert checkpoints.latest(None, written) == written
    assert checkpoints.latest(written, None) == written
