"""The training scripts' reporter (ddp_operator.progress) against a real HTTP server here: rank
0 only, rate-limited with the last step at once, never raising, never blocking, saying once."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from ddp_operator import progress

from harness.cluster import wait_for


class Endpoint(http.server.ThreadingHTTPServer):
    """Takes reports (or answers ``code``), keeping them and their Authorization headers."""

    def __init__(self, code: int = 202) -> None:
        self.code, self.got, self.auth = code, [], []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.got.append(json.loads(body))
                endpoint.auth.append(self.headers.get("Authorization"))
                self.send_response(endpoint.code)
                self.end_headers()
                self.wfile.write(b"no worker of that job\n" if endpoint.code >= 400 else b"")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/namespaces/n/ddpjobs/j/progress"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.shutdown()
    e.server_close()


def test_rank_0_reports_the_latest_at_most_once_an_interval_and_the_last_step_at_once(
    endpoint: Endpoint, tmp_path, monkeypatch
) -> None:
    token = tmp_path / "token"
    token.write_text("tok\n")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("DDP_ATTEMPT", "2")
    r = progress.Reporter(endpoint.url, str(token), interval=0.5)
    t0 = time.monotonic()
    for step in range(1, 101):
        r.report(step, 100, loss=1 / step, samples_per_s=10.0, bad="x")
        time.sleep(0.01)
    took = time.monotonic() - t0
    wait_for(lambda: endpoint.got and endpoint.got[-1]["step"] == 100, 5, what="the last step")
    assert took < 1.5  # 100 steps of 10 ms: reporting held nothing up
    steps = [g["step"] for g in endpoint.got]
    assert steps[0] == 1 and steps == sorted(steps) and 3 <= len(steps) <= 5, steps
    last = endpoint.got[-1]
    assert last["total"] == 100 and last["etaSeconds"] == 0 and last["attempt"] == 2
    assert last["metrics"] == {"loss": 0.01, "samples_per_s": 10.0}  # "x" is no number
    assert set(endpoint.auth) == {"Bearer tok"}
    mid = endpoint.got[1]
    assert 0 < mid["etaSeconds"] < 5  # the rate of this process: ~100 steps a second


def test_other_ranks_report_nothing(endpoint: Endpoint, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "3")
    r = progress.Reporter(endpoint.url, None, interval=0)
    r.report(5, 10)
    r.flush()
    time.sleep(0.3)
    assert endpoint.got == []


def test_no_operator_no_url_or_a_refusal_is_said_once_and_never_raised(
    endpoint: Endpoint, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("RANK", "0")
    unset = progress.Reporter(None, None)
    down = progress.Reporter("http://127.0.0.1:9/nothing", None, interval=0)
    endpoint.code = 403
    refused = progress.Reporter(endpoint.url, "/no/such/token", interval=0)
    for step in range(3):
        for r in (unset, down, refused):
            r.report(step, 3)
            r.flush()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3, err
    assert "DDP_PROGRESS_URL is not set" in err[0] and err[0].endswith("training goes on")
    assert "cannot reach the operator at http://127.0.0.1:9/nothing" in err[1]
    assert "/no/such/token" in err[2]  # the token file is missing: said, not raised


def test_report_configured_from_the_env(endpoint: Endpoint, monkeypatch) -> None:
    monkeypatch.setenv(progress.URL_ENV, endpoint.url)
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.1")
    monkeypatch.delenv("RANK", raising=False)  # a single process: rank 0
    monkeypatch.setattr(progress, "_reporter", None)
    progress.report(7, 7)
    wait_for(lambda: endpoint.got, 5, what="a report")
    assert endpoint.got[0]["step"] == 7 and endpoint.got[0]["metrics"] == {}


def test_the_last_step_reaches_the_job_though_the_script_exits_at_once(tmp_path) -> None:
    """The interpreter stops the sending thread at exit: a report on its way still goes out
    first. A real process whose every report takes 0.3 s to send (its token file is a pipe
    this test answers slowly), exiting while the last one is on its way."""
    endpoint = Endpoint()
    token = tmp_path / "token"
    os.mkfifo(token)
    stop = threading.Event()

    def answer_slowly() -> None:
        while not stop.is_set():
            with contextlib.suppress(BrokenPipeError), open(token, "w") as f:
                time.sleep(0.3)  # the reader waits: one report being sent
                f.write("tok")

    threading.Thread(target=answer_slowly, daemon=True).start()
    script = "from ddp_operator.progress import report\nimport time\n"
    script += "for i in range(1, 51): report(i, 50)\ntime.sleep(0.4)\n"
    env = {**os.environ, progress.URL_ENV: endpoint.url, progress.TOKEN_ENV: str(token)}
    env |= {progress.INTERVAL_ENV: "0.1", "RANK": "0"}
    try:
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=30)
        assert endpoint.got[-1]["step"] == 50, endpoint.got
    finally:
        stop.set()
        endpoint.shutdown()
        endpoint.server_close()
        with contextlib.suppress(OSError):  # let the answering thread go
            os.close(os.open(token, os.O_RDONLY | os.O_NONBLOCK))


def test_reports_past_the_last_step_wait_their_interval(endpoint: Endpoint, monkeypatch) -> None:
    """The first report of the last step goes at once; a script that underestimated ``total``
    and reports on past it is rate-limited like any other (not one request a step)."""
    monkeypatch.setenv("RANK", "0")
    r = progress.Reporter(endpoint.url, None, interval=0.5)
    for step in range(10, 60):
        r.report(step, 10)
        time.sleep(0.01)
    r.flush()
    steps = [g["step"] for g in endpoint.got]
    assert steps[0] == 10 and steps[-1] == 59 and len(steps) <= 4, steps


def test_a_phase_is_sent_at_once_with_its_bound(endpoint: Endpoint, monkeypatch) -> None:
    """Before a long save the script says so: that report goes at once (the script is about to
    go quiet), not after the interval; the phase's next report waits its interval as any."""
    monkeypatch.setenv("RANK", "0")
    r = progress.Reporter(endpoint.url, None, interval=60)
    r.report(10, 100)
    wait_for(lambda: len(endpoint.got) == 1, 5, what="the first report")
    r.report(10, 100, phase="checkpoint", phase_timeout=899.5)
    wait_for(lambda: len(endpoint.got) == 2, 5, what="the phase's report, within the interval")
    assert endpoint.got[1] | {"metrics": {}} == {
        "step": 10,
        "total": 100,
        "metrics": {},
        "phase": "checkpoint",
        "phaseTimeoutSeconds": 900,
    }
    r.report(10, 100, phase="checkpoint")  # the same phase: no hurry
    r.report(11, 100)  # its end waits its interval too
    with r._cond:
        assert r._pending is not None and r._pending["step"] == 11 and not r._urgent
    assert len(endpoint.got) == 2


def test_a_phase_goes_at_once_only_where_it_is_not_the_one_last_sent(
    endpoint: Endpoint, monkeypatch
) -> None:
    """Issue 68: Lightning's callback reports each checkpoint save as a phase, ended by the next
    step; a save at every step made every report urgent, one post a step whatever the
    interval. The same phase again, before the report that ended it went, waits its turn."""
    monkeypatch.setenv("RANK", "0")
    r = progress.Reporter(endpoint.url, None, interval=60)
    r.report(10, 100)
    wait_for(lambda: len(endpoint.got) == 1, 5, what="the first report")
    r.report(10, 100, phase="checkpoint")
    wait_for(lambda: len(endpoint.got) == 2, 5, what="the phase's report, within the interval")
    for step in (11, 12):  # a step, then the next save: the operator knows that phase
        r.report(step, 100)
        r.report(step, 100, phase="checkpoint")
    with r._cond:
        assert r._pending is not None and r._pending["step"] == 12 and not r._urgent
    r.report(12, 100, phase="validation")  # another phase: at once
    wait_for(lambda: len(endpoint.got) == 3, 5, what="the new phase's report")
    assert [g.get("phase") for g in endpoint.got] == [None, "checkpoint", "validation"]


def test_a_phase_the_operator_would_refuse_is_left_out_and_a_metric_named_phase_kept(
    endpoint: Endpoint, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("RANK", "0")
    r = progress.Reporter(endpoint.url, None, interval=0.05)
    r.report(1, 10, phase=" Checkpoint ", phase_timeout=10**9)
    wait_for(lambda: len(endpoint.got) == 1, 5, what="the first report")
    assert (endpoint.got[0]["phase"], endpoint.got[0]["phaseTimeoutSeconds"]) == (
        "checkpoint",
        7 * 86400,
    )
    r.report(2, 10, phase="eval/val")
    r.report(3, 10, phase=2)  # a script's own metric of that name, as before
    wait_for(lambda: endpoint.got[-1]["step"] == 3, 5, what="the third report")
    assert "phase" not in endpoint.got[-1] and endpoint.got[-1]["metrics"] == {"phase": 2.0}
    assert all("phase" not in g for g in endpoint.got[1:])
    assert capsys.readouterr().err.count("is no phase name") == 1


def test_a_checkpoint_is_sent_at_once_with_the_last_report_and_kept_in_every_report_after(
    endpoint: Endpoint, monkeypatch
) -> None:
    """A save is said at once (a failure may follow it), carrying the last report's step,
    total and metrics (the job's progress stays whole); every later report repeats it, so a
    report lost or replaced within the interval loses no checkpoint."""
    monkeypatch.setenv("RANK", "0")
    r = progress.Reporter(endpoint.url, None, interval=60)
    r.report(20, 100, loss=0.5)
    wait_for(lambda: len(endpoint.got) == 1, 5, what="the first report")
    assert "checkpoint" not in endpoint.got[0]
    r.checkpoint(20, "/ckpt/step-20")
    wait_for(lambda: len(endpoint.got) == 2, 5, what="the checkpoint, within the interval")
    assert endpoint.got[1] | {"etaSeconds": 0} == {
        "step": 20,
        "total": 100,
        "etaSeconds": 0,
        "metrics": {"loss": 0.5},
        "checkpoint": {"step": 20, "path": "/ckpt/step-20"},
    }
    r.report(21, 100)
    with r._cond:
        assert r._pending is not None and not r._urgent
        assert r._pending["checkpoint"] == {"step": 20, "path": "/ckpt/step-20"}
    r.checkpoint(30, "x" * (progress.MAX_PATH + 1))  # too long a path: the step still goes
    wait_for(lambda: len(endpoint.got) == 3, 5, what="the second checkpoint")
    assert endpoint.got[2]["checkpoint"] == {"step": 30}


def test_where_to_resume_is_read_from_the_env(monkeypatch) -> None:
    monkeypatch.delenv(progress.RESUME_STEP_ENV, raising=False)
    assert progress.last_checkpoint() is None
    monkeypatch.setenv(progress.RESUME_STEP_ENV, "40")
    monkeypatch.setenv(progress.RESUME_PATH_ENV, "")
    assert progress.last_checkpoint() == (40, None)
    monkeypatch.setenv(progress.RESUME_PATH_ENV, "/ckpt/40")
    assert progress.last_checkpoint() == progress.Checkpoint(40, "/ckpt/40")
    monkeypatch.setenv(progress.RESUME_STEP_ENV, "forty")
    assert progress.last_checkpoint() is None


def test_another_rank_s_checkpoint_is_not_sent(endpoint: Endpoint, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    r = progress.Reporter(endpoint.url, None, interval=0.01)
    r.checkpoint(5)
    assert r._thread is None and r._checkpoint is None
