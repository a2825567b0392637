"""Benchmarks of ddp-operator against the API server's own limit (raw), Kubeflow's training
operator v1 and JobSet, all in one run on the same cluster. Ratios, not absolute times, are the
result; see bench/README.md for the scenarios.

    python bench/run.py [--quick] [--only ours,raw,...]      (make bench / make bench-quick)
    python bench/run.py [--quick] --s9-only [defaults,stall-off,recreate,unmodified]   (S9 alone)
    python bench/run.py --s7-only                                           (S7 alone)
    python bench/run.py [--quick] --helpers-only    (what delivering the helpers costs: S1, S5, S7)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from helpers_cost import helpers_cost
from s5_alone import s5_alone

from cluster import CONCURRENCY, RESULTS, ROOT, Cluster, log
from contenders.base import Contender
from contenders.jobset import JobSet
from contenders.kubeflow import Kubeflow
from contenders.ours import Ours
from contenders.raw import Raw
from cost import memory_mb, reset_peak
from podwatch import Stalled
from report import CONTENDERS, ratios, result_line, spread_line, write
from scenarios.completion import completion, percentile
from scenarios.elastic import elastic_recovery
from scenarios.goodput import Reporting, goodput
from scenarios.goodput_job import CONFIGS
from scenarios.progress import progress_cost
from scenarios.recovery import available, recovery
from scenarios.restart import restart
from scenarios.scale import scale
from scenarios.startup import startup

KINDS: dict[str, type[Contender]] = {
    "raw": Raw,
    "ours": Ours,
    "kubeflow": Kubeflow,
    "jobset": JobSet,
}
QUICK = {
    "s1_nodes": 64,
    "s2_jobs": 50,
    "s3_jobs": 25,
    "s4_jobs": 250,
    "s5_nodes": 512,
    "s5l_nodes": 0,  # S5 at the larger size: full runs only
    "s6_nodes": 16,
    "s8_jobs": 100,
    "s8_window": 30,
}
FULL = {
    "s1_nodes": 256,
    "s2_jobs": 200,
    "s3_jobs": 100,
    "s4_jobs": 1000,
    "s5_nodes": 2048,
    "s5l_nodes": 4096,
    "s6_nodes": 64,
    "s8_jobs": 1000,
    "s8_window": 60,
}
S5 = ("raw", "ours", "jobset")  # Kubeflow's 20 requests per second would take minutes
# The contenders run in interleaved rounds (ours, raw, Kubeflow, JobSet; again; again), each
# round with its controller started afresh, so that a slow minute of this shared 2-core machine
# falls on one run of each, not on all runs of one; the medians and the ratios' spread are over
# the rounds. Kubeflow runs S2 in the first round only: its client's 20 requests per second make
# each run long (45 s for the quick run's 50 jobs) and alike. S3 and S5 at 4096 run in the last.
ROUNDS = 3
S7_RUNS = 5  # failures per restart strategy: the median of 5


def contender_round(ct: Contender, sizes: dict[str, int], res: dict[str, Any], last: bool) -> None:
    """One run of each scenario but S4 for one contender, its controller started for them."""
    runs: dict[str, list[dict[str, Any]]] = res["runs"].setdefault(ct.name, {})
    peaks: dict[str, float] = res["rss_mb"].setdefault(ct.name, {})

    def record(scenario: str, run: Any) -> None:
        runs.setdefault(scenario, []).append(dataclasses.asdict(run))
        if pids := ct.pids():  # the controller's peak RSS in this run, then from here on
            peak = sum(memory_mb(p)[1] for p in pids)
            peaks[scenario] = round(max(peaks.get(scenario, 0.0), peak), 1)
            for pid in pids:
                reset_peak(pid)
        cpu = " ".join(
            f"{role} {sec:.1f}" for role, sec in run.cpu.items() if role not in ("steal", "wall")
        )
        if "wall" in run.cpu:
            cpu += f"; stolen {run.cpu['steal']:.1f} of {run.cpu['wall']:.1f} s metered"
        log(
            f"{scenario.upper()} {ct.title} {len(runs[scenario])}: {run.seconds:.2f} s; CPU s {cpu}"
        )

    with ct.running():
        record("s1", startup(ct, 1, sizes["s1_nodes"], "s1"))
        if ct.name != "kubeflow" or "s2" not in runs:
            record("s2", startup(ct, sizes["s2_jobs"], 4, "s2"))
        if ct.name in S5:
            record("s5", startup(ct, 1, sizes["s5_nodes"], "s5"))
            if last and sizes["s5l_nodes"]:
                record("s5l", startup(ct, 1, sizes["s5l_nodes"], "s5l"))
        if ct.job_api:
            if last:
                lat, run = completion(ct, sizes["s3_jobs"])
                res["s3"][ct.name] = {
                    "ms": lat,
                    "p50_ms": percentile(lat, 50),
                    "p99_ms": percentile(lat, 99),
                }
                record("s3", run)
            record("s6", restart(ct, sizes["s6_nodes"]))
        if peaks:
            res["peak_rss_mb"][ct.name] = max(peaks.values())
        if (asked := ct.requests()) is not None:
            total = res["requests"].setdefault(ct.name, {})
            for verb, n in asked.items():
                total[verb] = total.get(verb, 0) + n
            log(f"{ct.title}'s own API requests in this round: {asked}")


def goodput_run(
    cluster: Cluster, pool: ThreadPoolExecutor, quick: bool, configs: tuple[str, ...] | None
) -> dict[str, Any]:
    """S9 under an operator of its own whose progress endpoint the real node's pods reach."""
    reporting = Reporting(cluster, pool)
    with reporting.running():
        return goodput(reporting, quick, configs)


def s7_alone(cluster: Cluster, pool: ThreadPoolExecutor) -> int:
    """``--s7-only``: S7 alone; its figures in results/s7.json (the README's table and
    latest.json stay as the last whole run left them) and a RESULT line of its keys."""
    ours = Ours(cluster, pool)
    if not available(ours):
        log("S7 cannot run: no local real node (hack/cluster/realnode.sh)")
        return 1
    log(f"S7: recovery on the real node, {S7_RUNS} failures per restart strategy")
    with ours.running():
        s7 = recovery(ours, S7_RUNS) | elastic_recovery(ours, S7_RUNS)
    (RESULTS / "s7.json").write_text(json.dumps(s7, indent=2) + "\n")
    figures = {k: v for k, v in ratios({"runs": {}, "s7": s7}).items() if k.startswith("s7_")}
    print(result_line(figures), flush=True)
    return 0


def s9_alone(
    cluster: Cluster, pool: ThreadPoolExecutor, quick: bool, configs: tuple[str, ...] | None
) -> int:
    """``--s9-only``: S9 alone; its figures in results/s9.json (the README's table and
    latest.json stay as the last whole run left them) and a RESULT line of its keys."""
    if not available(Ours(cluster, pool)):
        log("S9 cannot run: no local real node (hack/cluster/realnode.sh)")
        return 1
    try:
        s9 = goodput_run(cluster, pool, quick, configs)
    except Stalled as exc:
        log(f"cannot measure: {exc}")
        return 1
    (RESULTS / "s9.json").write_text(json.dumps(s9, indent=2) + "\n")
    figures = {k: v for k, v in ratios({"runs": {}, "s9": s9}).items() if k.startswith("s9_")}
    print(result_line(figures), flush=True)
    return 0


def s8_alone(cluster: Cluster, pool: ThreadPoolExecutor, sizes: dict[str, int]) -> int:
    """S8 by itself (``--s8-only``), its figures in results/ (not the README's table)."""
    log(f"S8: {sizes['s8_jobs']} jobs reporting progress, a fresh operator")
    ours = Ours(cluster, pool)
    with ours.running():
        s8 = progress_cost(ours, sizes["s8_jobs"], sizes["s8_window"])
    log(f"S8: {s8}")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M")
    out = RESULTS / f"s8-{sizes['s8_jobs']}-{stamp}.json"
    out.write_text(json.dumps(s8, indent=1) + "\n")
    print(out, flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (bench/README.md gives its latest time)"
    )
    parser.add_argument(
        "--only",
        default=",".join(CONTENDERS),
        help="contenders to run, comma-separated (default: all)",
    )
    parser.add_argument("--no-s4", action="store_true", help="skip S4 (scale)")
    parser.add_argument(
        "--s9-only",
        nargs="?",
        const="",
        metavar="CONFIGS",
        help="run S9 (goodput, real node) alone, for these configurations, comma-separated "
        f"(of {', '.join(CONFIGS)}; default: the run's own: --quick's defaults, else all)",
    )
    parser.add_argument("--s7-only", action="store_true", help="run S7 (recovery, real node) alone")
    parser.add_argument(
        "--s5-only", action="store_true", help="run S5 (2048 workers; raw, ours, JobSet) alone"
    )
    parser.add_argument(
        "--s8-only", action="store_true", help="run S8 (progress at 1000 jobs; ours) alone"
    )
    parser.add_argument(
        "--helpers-only",
        action="store_true",
        help="run S1, S5 and S7 (in place) with and without the helpers' delivery "
        "(--helpers-image), interleaved: what it costs",
    )
    args = parser.parse_args()
    s9_configs = tuple(w for w in (args.s9_only or "").split(",") if w) or None
    if unknown := set(s9_configs or ()) - set(CONFIGS):
        parser.error(f"unknown S9 configuration(s) {sorted(unknown)}: choose from {list(CONFIGS)}")
    wanted = [w for w in args.only.split(",") if w]
    if unknown := set(wanted) - set(KINDS):
        parser.error(f"unknown contender(s) {sorted(unknown)}: choose from {sorted(KINDS)}")
    if "jobset" in wanted and os.environ.get("KUBECONFIG"):
        log(
            "JobSet runs only on the local cluster (its webhooks are served on this machine): "
            "left out for KUBECONFIG's cluster"
        )
        wanted.remove("jobset")
    sizes = QUICK if args.quick else FULL
    RESULTS.mkdir(parents=True, exist_ok=True)
    cluster = Cluster()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/ddpjobs.ddp-operator.io")
    pool = ThreadPoolExecutor(CONCURRENCY)
    if args.s9_only is not None:
        return s9_alone(cluster, pool, args.quick, s9_configs)
    if args.s7_only:
        return s7_alone(cluster, pool)
    if args.s5_only:
        cluster.bench_nodes()
        return s5_alone(cluster, pool, sizes["s5_nodes"])
    if args.s8_only:
        cluster.bench_nodes()
        return s8_alone(cluster, pool, sizes)
    if args.helpers_only:
        cluster.bench_nodes()
        try:
            return helpers_cost(cluster, pool, sizes)
        except Stalled as exc:
            log(f"cannot measure: {exc}")
            return 1
    cluster.bench_nodes()
    res: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "cores": os.cpu_count() or 1,
        "sizes": sizes,
        "runs": {},
        "s3": {},
        "peak_rss_mb": {},
        "rss_mb": {},
        "requests": {},
    }
    try:
        contenders = [KINDS[name](cluster, pool) for name in KINDS if name in wanted]
        for r in range(ROUNDS):
            last = r == ROUNDS - 1
            for ct in contenders:
                log(
                    f"round {r + 1} of {ROUNDS}, {ct.title}: S1 ({sizes['s1_nodes']} workers), "
                    f"S2 ({sizes['s2_jobs']} jobs x 4)"
                    + (", S5" if ct.name in S5 else "")
                    + ("" if ct.name == "raw" else (", S3, S6" if last else ", S6"))
                )
                contender_round(ct, sizes, res, last)
        for ct in contenders:
            ct.close()
        if "ours" in wanted and not args.no_s4:
            log(f"S4: {sizes['s4_jobs']} jobs x 4 over 60 s, a fresh operator")
            ours = Ours(cluster, pool)
            with ours.running():
                res["s4"] = scale(ours, sizes["s4_jobs"])
            # The last scenario: its thousands of pods are left to go while the report is made.
            ours.cluster.drop(*ours.used, wait=False)
            log(f"S4: {res['s4']}")
            log(f"S8: {sizes['s8_jobs']} jobs reporting progress, a fresh operator")
            ours = Ours(cluster, pool)
            with ours.running():
                res["s8"] = progress_cost(ours, sizes["s8_jobs"], sizes["s8_window"])
            log(f"S8: {res['s8']}")
        if "ours" in wanted:
            ours = Ours(cluster, pool)
            if available(ours):
                log(f"S7: recovery on the real node, {S7_RUNS} failures per restart strategy")
                with ours.running():
                    res["s7"] = recovery(ours, S7_RUNS) | elastic_recovery(ours, S7_RUNS)
                log("S9: goodput on the real node, failures injected on a seeded schedule")
                res["s9"] = goodput_run(cluster, pool, args.quick, None)
            else:
                log("S7 and S9 left out: no local real node (hack/cluster/realnode.sh)")
    except Stalled as exc:
        log(f"cannot measure: {exc}")
        return 1
    result = write(res, RESULTS, ROOT / "bench" / "README.md")
    print(spread_line(res), flush=True)
    print(result, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
