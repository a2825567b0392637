"""`kubectl ddp top`: one line per job with its progress bar, ETA and throughput."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ddp_operator.commands.topview import bar, render_top

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def job(name: str, phase: str, progress: dict | None, ns: str = "a") -> dict:
    status = {"phase": phase, "workers": {"running": 2}}
    if progress is not None:
        status["progress"] = progress
    created = (NOW - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"nodes": 2},
        "status": status,
    }


def test_bar() -> None:
    assert bar(35.0) == "[#######-------------]  35.0%"
    assert bar(100) == "[####################] 100.0%"


def test_the_table() -> None:
    fresh = {"step": 42, "total": 120, "percent": 35.0, "eta": "3m10s",
             "updated": "2026-11-25T11:59:58Z", "metrics": {"samples_per_s": 5400.4}}  # fmt: skip
    old = {**fresh, "updated": "2026-11-25T11:50:00Z"}
    lines = render_top(
        [
            job("train", "Running", fresh),
            job("quiet", "Pending", None),
            job("hung", "Running", old),
        ],
        NOW,
    ).splitlines()
    assert lines[0].split() == [
        "NAME", "PHASE", "WORKERS", "PROGRESS", "STEP", "ETA", "SAMPLES/S", "AGE"
    ]  # fmt: skip
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert by_name["train"].split() == [
        "train", "Running", "2/2", "[#######-------------]", "35.0%", "42/120", "3m10s", "5,400",
        "3m",
    ]  # fmt: skip
    assert "stale 10m" in by_name["hung"]
    assert by_name["quiet"].split()[3:] == ["-", "-", "-", "-", "3m"]
    assert render_top([job("x", "Running", None, "b")], NOW, namespaced=False).startswith(
        "NAMESPACE"
    )
    assert render_top([], NOW) == "no DDPJobs"
