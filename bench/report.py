"""The benchmark's outputs: ratios from the raw numbers, results/latest.json, the table between
the markers of bench/README.md, and the RESULT line."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from cost import cluster_cpu

CONTENDERS = ("ours", "raw", "kubeflow", "jobset")
TITLES = {"ours": "ours", "raw": "raw", "kubeflow": "Kubeflow v1", "jobset": "JobSet"}
NAN = float("nan")


def median_time(res: dict[str, Any], who: str, scenario: str) -> float:
    """The median seconds of a contender's runs of a scenario (nan if it did not run it)."""
    runs = res["runs"].get(who, {}).get(scenario) or []
    return statistics.median(r["seconds"] for r in runs) if runs else NAN


def spread(res: dict[str, Any], num: str, den: str, scenario: str) -> tuple[float, float]:
    """The least and greatest of ``num``'s time over ``den``'s, round by round (the runs of a
    round are side by side: run i of each); (nan, nan) if either did not run it."""
    get = lambda who: [r["seconds"] for r in res["runs"].get(who, {}).get(scenario) or []]  # noqa: E731
    per = [a / b for a, b in zip(get(num), get(den), strict=False)]
    return (min(per), max(per)) if per else (NAN, NAN)


def spreads(res: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """The spread over the rounds of each time ratio of the RESULT line that has one."""
    pairs = {
        "s1_ratio_raw": ("ours", "raw", "s1"),
        "s1_ratio_jobset": ("jobset", "ours", "s1"),
        "s1_ratio_peer": ("kubeflow", "ours", "s1"),
        "s2_ratio_raw": ("ours", "raw", "s2"),
        "s2_ratio_jobset": ("jobset", "ours", "s2"),
        "s6_ratio_jobset": ("jobset", "ours", "s6"),
        "s5_ratio_jobset": ("jobset", "ours", "s5"),
    }
    return {k: spread(res, *v) for k, v in pairs.items()}


def spread_line(res: dict[str, Any]) -> str:
    """SPREAD k=lo..hi ...: each ratio's least and greatest round, where it has two or more."""
    parts = [
        f"{k}={lo:.2f}..{hi:.2f}"
        for k, (lo, hi) in spreads(res).items()
        if not math.isnan(lo) and len(res["runs"].get("ours", {}).get(k[:2], [])) > 1
    ]
    return "SPREAD " + " ".join(parts)


def cpu_per_1000_pods(res: dict[str, Any], who: str, scenario: str) -> float:
    """The median over runs of the controller's and control plane's CPU s per 1000 pods."""
    runs = res["runs"].get(who, {}).get(scenario) or []
    values = [c * 1000 / r["pods"] for r in runs if (c := cluster_cpu(r["cpu"])) is not None]
    return statistics.median(values) if values else NAN


def stolen(res: dict[str, Any], who: str) -> float:
    """The share of the machine's CPU time the hypervisor took during a contender's runs."""
    runs = [r for rs in res["runs"].get(who, {}).values() for r in rs if "wall" in r["cpu"]]
    wall = sum(r["cpu"]["wall"] for r in runs) * res.get("cores", 1)
    return sum(r["cpu"]["steal"] for r in runs) / wall if wall else NAN


def ratios(res: dict[str, Any]) -> dict[str, float]:
    """The RESULT line's figures: *_ratio_raw is ours/raw; *_ratio_<peer> is peer/ours."""
    t = lambda who, s: median_time(res, who, s)  # noqa: E731
    s4 = res.get("s4") or {}
    s7 = res.get("s7") or {}
    peak = res.get("peak_rss_mb", {})
    return {
        "s1_ratio_raw": t("ours", "s1") / t("raw", "s1"),
        "s1_ratio_jobset": t("jobset", "s1") / t("ours", "s1"),
        "s1_ratio_peer": t("kubeflow", "s1") / t("ours", "s1"),
        "s2_ratio_raw": t("ours", "s2") / t("raw", "s2"),
        "s2_ratio_jobset": t("jobset", "s2") / t("ours", "s2"),
        "s3_p99_ms": (res.get("s3", {}).get("ours") or {}).get("p99_ms", NAN),
        "s4_rss_mb": s4.get("peak_rss_mb", NAN),
        "cpu_ratio_jobset": cpu_per_1000_pods(res, "jobset", "s2")
        / cpu_per_1000_pods(res, "ours", "s2"),
        "s6_ratio_jobset": t("jobset", "s6") / t("ours", "s6"),
        "s7_inplace_speedup": _median(s7.get("Recreate")) / _median(s7.get("InPlace")),
        "s7_elastic_speedup": _median(s7.get("GroupRestart")) / _median(s7.get("ElasticReplace")),
        # A blamed worker moved to the other real node while the rest restart in place, in units
        # of the plain in-place group restart (issue 72: within a group restart plus a pod start).
        "s7_move_one_ratio": _median(s7.get("MoveOne")) / _median(s7.get("InPlace")),
        # S5 at both sizes (a full run): the lesser, so that a goal met is met at both.
        "s5_ratio_jobset": min(
            (t("jobset", s) / t("ours", s) for s in ("s5", "s5l") if not math.isnan(t("ours", s))),
            default=NAN,
        ),
        "rss_ratio_jobset": peak.get("jobset", NAN) / peak.get("ours", NAN),
        # S8: the operator's CPU seconds per 1000 progress reports, over its idle baseline.
        "s8_cpu_per_1000_reports": (res.get("s8") or {}).get("cpu_per_1000_reports", NAN),
        # S9, the defaults' run: ETTR (useful steps' time over wall time), hang -> restart in s.
        "s9_goodput": _s9(res, "ettr"),
        "s9_hang_detect_s": _s9(res, "hang_detect_s"),
        # S9, the script with no progress code: hang -> restart in s; whether the job named
        # the rank that hung (not yet: 0).
        "s9_hang_unmodified_s": _s9(res, "hang_detect_s", "unmodified"),
        "s9_culprit_named": _s9(res, "culprit_named", "unmodified"),
        # S9 per configuration: the bench's ETTR and the job's own (status.goodput.ratio).
        **{
            f"s9_{who}ettr_{config.replace('-', '_')}": _s9(res, f"{who}ettr", config)
            for config in S9_CONFIGS
            for who in ("", "job_")
        },
        # S9, the defaults: each failure kind's seconds back to training, as the job recorded.
        **{f"s9_back_s_{kind}": _s9_back(res, kind) for kind in S9_KINDS},
    }


S9_CONFIGS = ("defaults", "stall-off", "recreate", "unmodified")
S9_KINDS = ("crash", "oom", "hang", "evict")


def _s9_back(res: dict[str, Any], kind: str) -> float:
    """The defaults' run: the seconds from the failure of ``kind`` to the next first step, as
    the job recorded them (nan if none)."""
    run = ((res.get("s9") or {}).get("runs") or {}).get("defaults") or {}
    found = [c["firstStepSeconds"] for c in run.get("costs") or () if c["kind"] == kind]
    return float(found[0]) if found and found[0] is not None else NAN


def _s9(res: dict[str, Any], key: str, config: str = "defaults") -> float:
    """A figure of S9's run with ``config`` (nan if it did not run, or had no hang)."""
    run = ((res.get("s9") or {}).get("runs") or {}).get(config) or {}
    value = run.get(key)
    return NAN if value is None else float(value)


def _median(values: list[float] | None) -> float:
    return statistics.median(values) if values else NAN


def result_line(r: dict[str, float]) -> str:
    """RESULT k=v ...: ms and MB as integers, ratios with two decimals, nan where not run."""

    def fmt(k: str, v: float) -> str:
        if math.isnan(v):
            return "nan"
        return f"{v:.0f}" if k.endswith(("_ms", "_mb")) else f"{v:.2f}"

    return "RESULT " + " ".join(f"{k}={fmt(k, v)}" for k, v in r.items())


def _cell(v: float, unit: str = "s", digits: int = 2) -> str:
    return "-" if math.isnan(v) else f"{v:.{digits}f} {unit}".strip()


def table(res: dict[str, Any]) -> list[str]:
    """The README's results: time and cost per scenario, a column per contender."""
    r, sz = ratios(res), res["sizes"]
    head = "| scenario | " + " | ".join(TITLES[w] for w in CONTENDERS) + " | ours against them |"
    rule = "|---" * (len(CONTENDERS) + 2) + "|"
    time_rows = {
        "s1": f"S1: 1 job x {sz['s1_nodes']} workers -> all Running (median of 3)",
        "s2": f"S2: {sz['s2_jobs']} jobs x 4 applied together -> all Running "
        "(median of 3; Kubeflow: 1 run)",
        "s5": f"S5: 1 job x {sz['s5_nodes']} workers -> all Running",
        "s5l": f"S5: 1 job x {sz.get('s5l_nodes')} workers -> all Running",
        "s6": f"S6: 1 of {sz['s6_nodes']} workers fails -> next attempt all Running (median of 3)",
    }
    rows = [head, rule]
    ran = {s for runs in res["runs"].values() for s in runs}
    for s, title in time_rows.items():
        if s not in ran:
            continue
        cells = [_cell(median_time(res, w, s)) for w in CONTENDERS]
        rows.append(f"| {title} | " + " | ".join(cells) + f" | {_versus(res, s)} |")
    s3 = res.get("s3", {})
    cells = [
        f"p50 {s3[w]['p50_ms']:.0f} ms, p99 {s3[w]['p99_ms']:.0f} ms" if w in s3 else "-"
        for w in CONTENDERS
    ]
    rows.append(
        f"| S3: {sz['s3_jobs']} jobs x 4, last pod Succeeded -> job done | "
        + " | ".join(cells)
        + f" | p99 {r['s3_p99_ms']:.0f} ms |"
    )
    for s in ("s1", "s2", "s3", "s5", "s5l", "s6"):
        if s not in ran:
            continue
        cells = [_cell(cpu_per_1000_pods(res, w, s), "s", 1) for w in CONTENDERS]
        name = f"S5 ({sz['s5l_nodes']} workers)" if s == "s5l" else s.upper()
        rows.append(
            f"| {name} cost: CPU s per 1000 pods (controller + control plane) | "
            + " | ".join(cells)
            + f" | {_versus(res, s, cost=True)} |"
        )
    rows.append(
        "| CPU the hypervisor took from this machine during the runs | "
        + " | ".join("-" if math.isnan(v := stolen(res, w)) else f"{v:.0%}" for w in CONTENDERS)
        + " | |"
    )
    peak, per = res.get("peak_rss_mb", {}), res.get("rss_mb", {})
    rows.append(
        "| controller's peak RSS over S1-S3, S5, S6 (per scenario) | "
        + " | ".join(_rss(peak.get(w), per.get(w) or {}) for w in CONTENDERS)
        + f" | {_times(peak.get('jobset', NAN) / peak.get('ours', NAN), 'lighter', 'heavier')} "
        "than JobSet |"
    )
    if asked := res.get("requests", {}).get("ours"):
        rows.append(
            "| ours: its own API requests over S1-S3, S5, S6, by verb | "
            + ", ".join(f"{verb} {n}" for verb, n in asked.items())
            + " | - | - | - | Event lists only for workers stalled before their first container |"
        )
    if s4 := res.get("s4"):
        marks = ", ".join(f"{m} jobs {v:.0f} MB" for m, v in s4["rss_mb"].items())
        rows.append(
            f"| S4: {s4['jobs']} jobs x 4 over 60 s -> all Running; -> all Succeeded | "
            f"{s4['running_s']:.1f} s; {s4['succeeded_s']:.1f} s | - | - | - | RSS {marks} "
            f"({s4['rss_kb_per_job']:.0f} KB per job), peak {s4['peak_rss_mb']:.0f} MB; "
            f"{s4['cpu_per_1000_pods']:.1f} CPU s per 1000 pods |"
        )
    if s8 := res.get("s8"):
        rows.append(
            f"| S8: {s8['jobs']} jobs reporting progress every 10 s for {s8['seconds']:.0f} s "
            f"({s8['reports']} reports) | p50 {s8['p50_ms']:.0f} ms, p99 {s8['p99_ms']:.0f} ms | "
            f"- | - | - | operator CPU {s8['cpu_s']:.1f} s (idle, same jobs: "
            f"{s8['idle_cpu_s']:.1f} s): {s8['cpu_per_1000_reports']:.2f} s per 1000 reports; "
            f"API requests {s8['requests']}; {s8['written']} of {s8['jobs']} jobs show their "
            "last report |"
        )
        if flood := s8.get("flood"):
            rows.append(
                f"| S8 under a stranger's flood: every job reports once while made-up tokens "
                f"come from 4 threads for 10 s ({flood['stranger_requests']} requests, answered "
                f"{flood['stranger_answers']}) | jobs' reports p50 {flood['job_p50_ms']:.0f} ms, "
                f"p99 {flood['job_p99_ms']:.0f} ms, {flood['job_reports']} taken | - | - | - | "
                f"operator CPU {flood['cpu_per_1000_stranger_requests']:.2f} s per 1000 of the "
                f"flood's requests; TokenReviews meanwhile {flood['reviews']} |"
            )
    if s9 := res.get("s9"):
        kinds = ", ".join(f["kind"] for f in s9["failures"])
        for name, run in s9["runs"].items():
            hangs = ", ".join(f"{h['detect_s']:.1f} s" for h in run["hangs"]) or "-"
            back = ", ".join(
                f"{x['kind']} {x['firstStepSeconds']} s" for x in run.get("costs") or ()
            )
            job = f"; the job's ETTR {run['job_ettr']}, back to training: {back}" if back else ""
            rows.append(
                f"| S9 {name} ({run['config']}): {s9['steps']} steps x {s9['step_s']} s, "
                f"failures {kinds} | ETTR {run['ettr']:.2f} ({run['wall_s']:.1f} s, "
                f"{run['attempts']} attempts, {run['steps_lost']} steps lost{job}) | - | - | - | "
                f"hang -> restart {hangs} |"
            )
    return rows


def _versus(res: dict[str, Any], s: str, cost: bool = False) -> str:
    get = cpu_per_1000_pods if cost else median_time
    ours, parts = get(res, "ours", s), []
    if not cost and not math.isnan(raw := get(res, "raw", s)):
        parts.append(f"ours/raw {ours / raw:.2f}{_range(spread(res, 'ours', 'raw', s))}")
    for peer in ("kubeflow", "jobset"):
        if not math.isnan(theirs := get(res, peer, s)):
            better, worse = ("cheaper", "costlier") if cost else ("faster", "slower")
            parts.append(f"{_times(theirs / ours, better, worse)} than {TITLES[peer]}")
            if not cost:
                parts[-1] += _range(spread(res, peer, "ours", s))
    return "; ".join(parts)


def _range(lo_hi: tuple[float, float]) -> str:
    """ " (rounds 0.95-1.10)": a ratio's spread over the rounds, where there are two or more."""
    lo, hi = lo_hi
    return "" if math.isnan(lo) or lo == hi else f" (rounds {lo:.2f}-{hi:.2f})"


def _times(r: float, better: str, worse: str) -> str:
    """A ratio theirs/ours in words: "1.05x faster", "1.7x slower" ("-" if not measured)."""
    if math.isnan(r):
        return "-"
    word, r = (better, r) if r >= 1 else (worse, 1 / r)
    # 1.05x, not "1.0x slower": a small gap keeps its sign and size
    return f"{r:.2f}x {word}" if r < 1.1 else f"{r:.1f}x {word}"


def _rss(peak: float | None, per: dict[str, float]) -> str:
    """A controller's peak RSS, and per scenario."""
    if peak is None:
        return "-"
    return f"{peak:.0f} MB ({', '.join(f'{s.upper()} {v:.0f}' for s, v in per.items())})"


def write(res: dict[str, Any], results: Path, readme: Path) -> str:
    """latest.json, the README's table; returns the RESULT line."""
    res["ratios"] = ratios(res)
    (results / "latest.json").write_text(json.dumps(res, indent=2) + "\n")
    meta = (
        f"\n{'Quick run' if res['quick'] else 'Full run'} of {res['date']} on {res['machine']}.\n"
    )
    text = readme.read_text()
    head, rest = text.split("<!-- results -->", 1)
    tail = rest.split("<!-- /results -->", 1)[1]
    body = "\n".join(table(res))
    readme.write_text(f"{head}<!-- results -->\n{body}{meta}<!-- /results -->{tail}")
    return result_line(res["ratios"])
