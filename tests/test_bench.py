"""The benchmark's own parts (bench/): the report from known numbers, its /proc readings, and, on
the cluster, one measured run and a wait that cannot end failing at once, saying why."""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from run import QUICK

import cluster as bench_cluster
import cost
import report
from contenders.raw import Raw
from harness.cluster import Cluster
from podwatch import PodWatch, Stalled
from scenarios import goodput, goodput_job
from scenarios.startup import startup

KEYS = [
    "s1_ratio_raw",
    "s1_ratio_jobset",
    "s1_ratio_peer",
    "s2_ratio_raw",
    "s2_ratio_jobset",
    "s3_p99_ms",
    "s4_rss_mb",
    "cpu_ratio_jobset",
    "s6_ratio_jobset",
    "s7_inplace_speedup",
    "s7_elastic_speedup",
    "s7_move_one_ratio",
    "s5_ratio_jobset",
    "rss_ratio_jobset",
    "s8_cpu_per_1000_reports",
    "s9_goodput",
    "s9_hang_detect_s",
    "s9_hang_unmodified_s",
    "s9_culprit_named",
    "s9_ettr_defaults",
    "s9_job_ettr_defaults",
    "s9_ettr_stall_off",
    "s9_job_ettr_stall_off",
    "s9_ettr_recreate",
    "s9_job_ettr_recreate",
    "s9_ettr_unmodified",
    "s9_job_ettr_unmodified",
    "s9_back_s_crash",
    "s9_back_s_oom",
    "s9_back_s_hang",
    "s9_back_s_evict",
]


def runs(seconds: float, cpu: float, pods: int = 100) -> list[dict[str, Any]]:
    """Three runs of ``seconds``, each costing ``cpu`` (all in the API server) for ``pods`` pods."""
    usage = {"controller": 0.0, "apiserver": cpu, "etcd": 0.0, "kwok": 50.0}
    return [{"seconds": seconds, "pods": pods, "cpu": usage} for _ in range(3)]


def results(*contenders: str) -> dict[str, Any]:
    times = {"ours": 2.0, "raw": 1.6, "kubeflow": 10.0, "jobset": 3.0}
    res: dict[str, Any] = {
        "quick": True,
        "date": "2026-11-22 15:00 UTC",
        "machine": "x86_64, 2 cores",
        "sizes": dict(QUICK),
        "runs": {},
        "s3": {},
        "peak_rss_mb": {"ours": 90.0, "jobset": 135.0},
        "rss_mb": {"ours": {"s1": 80.0, "s5": 90.0}, "jobset": {"s1": 135.0}},
        "s4": {
            "jobs": 250,
            "running_s": 70.0,
            "succeeded_s": 20.0,
            "rss_mb": {62: 80, 250: 95},
            "rss_kb_per_job": 81.9,
            "peak_rss_mb": 101.0,
            "cpu_per_1000_pods": 30.0,
        },
        "s8": {
            "jobs": 100,
            "reports": 300,
            "seconds": 30.0,
            "written": 100,
            "cpu_s": 9.0,
            "idle_cpu_s": 3.0,
            "cpu_per_1000_reports": 20.0,
            "requests": {"patch_status": 300, "create_tokenreview": 100},
            "p50_ms": 8.0,
            "p99_ms": 40.0,
        },
        "s7": {
            "InPlace": [2.0, 1.0, 3.0],
            "Recreate": [6.0, 4.0, 5.0],
            "ElasticReplace": [4.0, 2.0],
            "GroupRestart": [6.0, 3.0],
            "MoveOne": [3.0, 2.0, 4.0],
        },
        "s9": {
            "steps": 40,
            "step_s": 0.5,
            "failures": [{"kind": "crash"}, {"kind": "hang"}],
            "runs": {
                "defaults": {
                    "config": "InPlace, stall detection 30 s",
                    "ettr": 0.25,
                    "wall_s": 80.0,
                    "attempts": 3,
                    "steps_lost": 7,
                    "hang_detect_s": 33.1,
                    "hangs": [{"detect_s": 33.1}],
                    "job_ettr": 0.26,
                    "costs": [
                        {"kind": "crash", "firstStepSeconds": 4.5},
                        {"kind": "hang", "firstStepSeconds": 39.0},
                    ],
                }
            },
        },
    }
    for who in contenders:
        res["runs"][who] = {
            s: runs(times[who], 4.0 if who == "ours" else 6.0) for s in ("s1", "s2", "s5", "s6")
        }
        if who != "raw":
            res["s3"][who] = {"p50_ms": 100.0, "p99_ms": 300.0}
    return res


def test_the_result_line_names_every_figure_and_ratios_point_the_way_the_issue_says():
    line = report.result_line(report.ratios(results("ours", "raw", "kubeflow", "jobset")))
    assert line.split()[0] == "RESULT"
    got = dict(kv.split("=") for kv in line.split()[1:])
    assert list(got) == KEYS
    # ours/raw for *_ratio_raw; peer/ours (above 1: we are faster or cheaper) for the peers.
    assert got["s1_ratio_raw"] == "1.25" and got["s2_ratio_raw"] == "1.25"
    assert got["s1_ratio_jobset"] == "1.50" and got["s1_ratio_peer"] == "5.00"
    assert got["s6_ratio_jobset"] == "1.50"
    assert got["cpu_ratio_jobset"] == "1.50"  # kwok (the kubelets' stand-in) is not counted
    assert got["s3_p99_ms"] == "300" and got["s4_rss_mb"] == "101"
    assert got["s7_inplace_speedup"] == "2.50"  # Recreate's median over InPlace's
    assert got["s7_elastic_speedup"] == "1.50"  # the group restart's median over the replacement's
    assert got["s7_move_one_ratio"] == "1.50"  # moving the blamed worker over the in-place restart
    assert got["s5_ratio_jobset"] == "1.50"
    assert got["rss_ratio_jobset"] == "1.50"  # JobSet controller's peak RSS over ours
    assert got["s8_cpu_per_1000_reports"] == "20.00"  # the operator's, over its idle baseline
    assert got["s9_goodput"] == "0.25" and got["s9_hang_detect_s"] == "33.10"  # the defaults' run
    assert got["s9_ettr_defaults"] == "0.25" and got["s9_job_ettr_defaults"] == "0.26"
    assert got["s9_ettr_recreate"] == "nan"  # not run (quick)
    assert got["s9_back_s_crash"] == "4.50" and got["s9_back_s_hang"] == "39.00"
    assert got["s9_back_s_oom"] == "nan"


def test_a_contender_that_did_not_run_is_nan_never_a_number():
    r = report.ratios(results("ours", "raw"))
    assert math.isnan(r["s1_ratio_jobset"]) and math.isnan(r["cpu_ratio_jobset"])
    assert "s1_ratio_peer=nan" in report.result_line(r)
    assert r["s1_ratio_raw"] == pytest.approx(1.25)


def test_the_table_replaces_only_what_is_between_the_markers(tmp_path: Path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- results -->\nold\n<!-- /results -->\nafter\n")
    line = report.write(results("ours", "raw", "jobset"), tmp_path, readme)
    text = readme.read_text()
    assert text.startswith("intro\n<!-- results -->\n| scenario | ours | raw | Kubeflow v1 |")
    assert text.endswith("<!-- /results -->\nafter\n") and "old" not in text
    assert "1.5x faster than JobSet" in text and "1.5x cheaper than JobSet" in text
    assert "peak 101 MB" in text
    s9 = "| S9 defaults (InPlace, stall detection 30 s): 40 steps x 0.5 s, failures crash, hang |"
    assert (
        f"{s9} ETTR 0.25 (80.0 s, 3 attempts, 7 steps lost; the job's ETTR 0.26, back to "
        "training: crash 4.5 s, hang 39.0 s) | - | - | - | hang -> restart 33.1 s |" in text
    )
    assert "| 90 MB (S1 80, S5 90) | - | - | 135 MB (S1 135) | 1.5x lighter than JobSet |" in text
    assert (tmp_path / "latest.json").exists() and line.startswith("RESULT s1_ratio_raw=1.25")


def test_cpu_and_memory_are_read_from_proc():
    before = cost.cpu_seconds(os.getpid())
    t = time.process_time()
    while time.process_time() - t < 0.3:
        pass
    assert cost.cpu_seconds(os.getpid()) - before >= 0.2
    rss, peak = cost.memory_mb(os.getpid())
    assert 0 < rss <= peak
    block = bytearray(64 << 20)  # 64 MB touched, then given back: the peak stays...
    block[::4096] = b"x" * len(block[::4096])
    del block
    assert cost.memory_mb(os.getpid())[1] >= peak + 60
    cost.reset_peak(os.getpid())  # ...until it starts over from what the process holds now
    assert cost.memory_mb(os.getpid())[1] < peak + 30


@pytest.fixture
def bench_nodes(cluster: Cluster) -> Any:
    """The benchmark's tainted nodes, removed after the test unless they were there before it (a
    benchmark running on this cluster lost them mid-run)."""
    label = f"{bench_cluster.BENCH_LABEL}=true"
    before = cluster.core.list_node(label_selector=label).items
    bench = bench_cluster.Cluster()
    bench.bench_nodes()
    yield bench
    if not before:
        cluster.kubectl("delete", "node", "-l", label, "--wait=false")


@pytest.mark.cluster
def test_a_raw_run_is_timed_and_costed_on_the_benchs_own_nodes(cluster: Cluster, bench_nodes):
    with ThreadPoolExecutor(4) as pool:
        raw = Raw(bench_nodes, pool)
        try:
            run = startup(raw, jobs=2, nodes=2, tag="test")
        finally:
            raw.close()
    assert run.pods == 4 and 0 < run.seconds < 120
    if cluster.local:  # the control plane runs on this machine: its processes are metered
        assert {"apiserver", "etcd", "controller-manager", "scheduler", "kwok"} <= set(run.cpu)
        assert run.cpu["apiserver"] > 0 and cost.cluster_cpu(run.cpu) is not None


@pytest.mark.cluster
def test_a_wait_that_cannot_end_fails_at_once_saying_why(cluster: Cluster, namespace: str):
    bench = bench_cluster.Cluster()
    pods = PodWatch(bench, namespace, lambda: "JobSet is not running; see its log")
    try:
        t0 = time.monotonic()
        with pytest.raises(Stalled, match=r"S1 JobSet: .*JobSet is not running; see its log"):
            pods.wait_running(1, "S1 JobSet: 1 job x 1 workers -> Running", timeout=600)
        assert time.monotonic() - t0 < 10
    finally:
        pods.close()


def operator_pods(nodes: int, restart: str) -> list[dict[str, Any]]:
    """Job ``j``'s worker pods as the runner builds them (``JobRunner.create``), the owner aside."""
    from ddp_operator.manifests import builders, progress_pod
    from ddp_operator.model.jobspec import resolve

    from contenders.raw import PROGRESS_URL

    spec = {"nodes": nodes, "restartStrategy": restart}
    spec["template"] = {"spec": bench_cluster.pod_spec("trainer")}
    job = resolve({"metadata": {"name": "j", "namespace": "ns", "uid": "raw"}, "spec": spec})
    pods = []
    for i in range(nodes):
        pod = builders.build_worker_pod(job, i, 0, restart == "InPlace")
        pod = progress_pod.add_reporting(pod, PROGRESS_URL)
        pod["metadata"].pop("ownerReferences", None)
        pods.append(pod)
    return pods


def test_raw_creates_exactly_the_pods_the_operator_creates_here():
    """The baseline's pods are ours, in-place watch and progress reporting included, so that
    ``*_ratio_raw`` compares controllers, not pod shapes (an in-place pod costs the control plane
    about a fifth more than a plain one at 2048 workers)."""
    from contenders.raw import objects

    pods = [o for o in objects("j", "ns", 3) if o["kind"] == "Pod"]
    assert pods == operator_pods(3, "InPlace")
    for pod in pods:
        names = [ct["name"] for ct in pod["spec"]["containers"]]
        assert names == ["trainer", "ddp-attempt-watch"]
    objs = objects("j", "ns", 3)
    configmaps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    common = pods[0]["spec"]["containers"][0]["envFrom"][-1]["configMapRef"]["name"]
    assert set(configmaps) == {"j-ddp-env", common}  # the ones the pods read
    assert configmaps[common]["data"]["MASTER_ADDR"] == "j-worker-0.j"


def test_raw_with_recreate_pods_creates_the_operators_recreate_pods_without_the_watch():
    """``--s5-only``'s fourth contender: the pods of a job with ``restartStrategy: Recreate``, so
    that raw against it is the in-place watch container's cost and nothing else."""
    from contenders.raw import RawRecreate, objects

    pods = [o for o in objects("j", "ns", 2, RawRecreate.restart) if o["kind"] == "Pod"]
    assert pods == operator_pods(2, "Recreate")
    for pod in pods:
        assert [ct["name"] for ct in pod["spec"]["containers"]] == ["trainer"]
        assert "shareProcessNamespace" not in pod["spec"]


def test_s9s_schedule_is_the_seeds_one_failure_per_attempt_each_reachable():
    """The same seed, the same failures; each attempt's comes after the previous one's (4 steps:
    its attempt has reported; 2 checkpoints past an eviction, which may act 10 steps late)."""
    full = goodput_job.schedule(goodput.SEED, goodput.FULL["steps"], goodput_job.KINDS)
    assert full == goodput_job.schedule(goodput.SEED, goodput.FULL["steps"], goodput_job.KINDS)
    assert sorted(f["kind"] for f in full) == sorted(goodput_job.KINDS)
    assert [f["attempt"] for f in full] == [0, 1, 2, 3]
    for before, after in pairwise(full):
        gap = 2 * goodput_job.EVERY + 4 if before["kind"] == "evict" else 4
        assert after["step"] >= before["step"] + gap, full
    assert full[0]["step"] >= 4 and full[-1]["step"] < goodput.FULL["steps"]
    # --quick: the defaults and the script with no progress code, a crash and a hang in 40
    # steps (about 90 s each on the real node).
    assert goodput.QUICK["configs"] == ("defaults", "unmodified") and goodput.QUICK["steps"] <= 40
    quick = goodput_job.schedule(goodput.SEED, goodput.QUICK["steps"], goodput.QUICK["kinds"])
    assert sorted(f["kind"] for f in quick) == ["crash", "hang"]


def test_s9s_job_is_the_configurations_own_and_carries_the_script_and_its_schedule(tmp_path: Path):
    failures = goodput_job.schedule(1, 40, ("crash", "hang"))
    for name, config in goodput_job.CONFIGS.items():
        body = goodput_job.job("j", "ns", "img", config, failures, 40, tmp_path)
        spec = body["spec"]
        assert (spec["nodes"], spec["procsPerNode"], spec["backend"]) == (2, 1, "gloo")
        assert spec["restartStrategy"] == ("Recreate" if name == "recreate" else "InPlace")
        (trainer,) = spec["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in trainer["env"]}
        assert json.loads(env["S9_FAILURES"]) == failures and env["DDP_PROGRESS_INTERVAL"] == "1"
        assert trainer["resources"]["limits"]["memory"] == "1Gi"  # "oom" touches 2 GiB
        assert trainer["command"][:2] == ["python3", "-c"]
        compile(trainer["command"][2], "goodput_train.py", "exec")
        timeout = int(env["S9_GLOO_TIMEOUT"])
        if name == "stall-off":  # gloo's own timeout ends the hang
            assert spec["stallDetection"] == {"enabled": False} and timeout <= 90
        else:  # stall detection, 30 s, well before gloo's
            assert spec["stallDetection"] == {"enabled": True, "timeoutSeconds": 30}
            assert timeout > config.hang_ends_in
