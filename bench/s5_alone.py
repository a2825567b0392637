"""``--s5-only``: S5 alone (one job of the full run's 2048 workers; raw, raw creating Recreate
pods, ours and JobSet in interleaved rounds), to measure the pods' shape quickly: raw against raw
with Recreate pods is what the in-place watch container costs. Its runs in results/s5.json (the
README's table and latest.json stay as the last whole run left them) and a RESULT line."""

from __future__ import annotations

import dataclasses
import json
import statistics
from concurrent.futures import ThreadPoolExecutor

from cluster import RESULTS, Cluster, log
from contenders.jobset import JobSet
from contenders.ours import Ours
from contenders.raw import Raw, RawRecreate
from report import result_line
from scenarios.startup import startup

ROUNDS = 3


def s5_alone(cluster: Cluster, pool: ThreadPoolExecutor, nodes: int) -> int:
    """Run S5 ``ROUNDS`` times per contender, interleaved; print the medians' ratios."""
    contenders = [
        Raw(cluster, pool),
        RawRecreate(cluster, pool),
        Ours(cluster, pool),
        JobSet(cluster, pool),
    ]
    runs: dict[str, list[dict]] = {ct.name: [] for ct in contenders}
    for r in range(ROUNDS):
        for ct in contenders:
            with ct.running():
                run = startup(ct, 1, nodes, "s5")
            runs[ct.name].append(dataclasses.asdict(run))
            cpu = sum(v for k, v in run.cpu.items() if k not in ("steal", "wall"))
            log(f"S5 {ct.title} {r + 1}: {run.seconds:.2f} s; CPU s {cpu:.1f}")
    for ct in contenders:
        ct.close()
    (RESULTS / "s5.json").write_text(json.dumps({"nodes": nodes, "runs": runs}, indent=2) + "\n")
    med = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    rounds = [
        (o["seconds"] / j["seconds"], o["seconds"] / w["seconds"])
        for o, j, w in zip(runs["ours"], runs["jobset"], runs["raw"], strict=True)
    ]
    log("ours/JobSet by round: " + ", ".join(f"{a:.2f}" for a, _ in rounds))
    log("ours/raw by round: " + ", ".join(f"{b:.2f}" for _, b in rounds))
    watch = [
        w["seconds"] / r["seconds"] for w, r in zip(runs["raw"], runs["raw-recreate"], strict=True)
    ]
    log("raw/raw with Recreate pods by round: " + ", ".join(f"{x:.2f}" for x in watch))
    figures = {
        "s5_ratio_jobset": round(med["jobset"] / med["ours"], 2),
        "s5_ratio_raw": round(med["ours"] / med["raw"], 2),
        "s5_watch_cost": round(med["raw"] / med["raw-recreate"], 2),
    }
    print(result_line(figures), flush=True)
    return 0
