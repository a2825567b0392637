"""``--helpers-only`` (issue 69): what delivering the operator's helpers to every worker costs.
The operator without the delivery (``ours``) and with it (``ours-helpers``: ``--helpers-image``,
the default ``InitContainer`` delivery: an init container copying them into an emptyDir) run in
interleaved rounds, each with its operator started afresh, the order of the two swapped every
round:

* S1: one job of ``s1_nodes`` workers -> every pod Running (kwok's nodes: the init container is
  simulated, so this is the operator's and the control plane's share of the heavier pod);
* S5: one job of ``s5_nodes`` workers (2048; ``--quick``: 512), the same on a larger group;
* S7: on the real node, a group restart in place (``scenarios.recovery``, the InPlace strategy
  only): worker 1 exits, the kubelet restarts every container of both pods, the init container
  included, and the time is from the exit to every process of attempt 1 past its
  ``init_process_group``: there the copy and the helpers' start in each Python process run.

The result is the ratios with/without of the medians, and each round's; the runs go to
results/helpers.json (the README's table and latest.json stay as the last whole run left them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from ddp_operator.manifests import helpers_pod
from ddp_operator.model import constants as c

from cluster import RESULTS, Cluster, log
from contenders.ours import Ours, OursHelpers
from cost import cluster_cpu
from report import NAN, result_line
from scenarios.recovery import REALNODE_SH, available, one, trainer_image
from scenarios.startup import startup

ROUNDS = 3
S7_PER_ROUND = 2  # in-place restarts per contender per round: 6 each


def operator_image() -> str:
    """The helpers' image: $DDP_HELPERS_IMAGE (another cluster's, pullable there), else the
    operator's image, built or taken from the cache and imported on the local real node."""
    if image := os.environ.get("DDP_HELPERS_IMAGE"):
        return image
    done = subprocess.run(
        [str(REALNODE_SH), "operator"], capture_output=True, text=True, timeout=3600
    )
    if done.returncode:
        raise RuntimeError(f"realnode.sh operator: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def check_delivery(ct: Ours) -> None:
    """A job of one worker: its pod has the helpers' init container (from the contender's
    image) exactly when the contender delivers them; else the run would compare nothing."""
    ns = ct.namespace("s1")
    ct.create(ns, ["helpers-check"], 1)
    deadline = time.monotonic() + 60
    while not (pods := ct.cluster.core.list_namespaced_pod(ns).items):
        if dead := ct.dead():
            raise RuntimeError(f"checking the delivery: {dead}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"checking the delivery: no pod in {ns} after 60 s")
        time.sleep(0.2)
    pod = ct.cluster.api.sanitize_for_serialization(pods[0])
    inits = {i["name"]: i["image"] for i in pod["spec"].get("initContainers") or ()}
    if helpers_pod.delivered(pod) != bool(ct.helpers_image) or (
        ct.helpers_image and inits.get(c.HELPERS_CONTAINER) != ct.helpers_image
    ):
        raise RuntimeError(
            f"{ct.title}: the pod's helpers are not as its operator was started "
            f"(--helpers-image {ct.helpers_image!r}): init containers {inits}, "
            f"volumes {[v['name'] for v in pod['spec'].get('volumes') or ()]}"
        )
    ct.drop(ns)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else NAN


def _finite(v: float) -> float | None:
    """JSON has no nan: None where a figure was not measured."""
    return None if math.isnan(v) else round(v, 3)


def _cpu_per_1000(runs: list[dict[str, Any]]) -> float:
    per = [x * 1000 / r["pods"] for r in runs if (x := cluster_cpu(r["cpu"])) is not None]
    return _median(per)


def helpers_cost(cluster: Cluster, pool: ThreadPoolExecutor, sizes: dict[str, int]) -> int:
    """Run the rounds; write results/helpers.json; print the SPREAD and RESULT lines."""
    t_start = time.monotonic()
    image = operator_image()
    ours, helpers = Ours(cluster, pool), OursHelpers(cluster, pool, image)
    real = available(ours)
    left_out = None if real else "no local real node (hack/cluster/realnode.sh)"
    trainer = trainer_image() if real else ""
    log(
        f"helpers' cost: {ROUNDS} rounds of S1 ({sizes['s1_nodes']} workers), S5 "
        f"({sizes['s5_nodes']} workers)"
        + (f", S7 ({S7_PER_ROUND} in-place restarts)" if real else "")
        + f" without and with the delivery (InitContainer, {image})"
    )
    if left_out:
        log(f"S7 left out: {left_out}")
    runs: dict[str, dict[str, list[Any]]] = {
        ct.name: {"s1": [], "s5": [], "s7": []} for ct in (ours, helpers)
    }
    for r in range(ROUNDS):
        order = (ours, helpers) if r % 2 == 0 else (helpers, ours)
        for ct in order:
            got = runs[ct.name]
            with ct.running():
                if r == 0:
                    check_delivery(ct)
                for tag in ("s1", "s5"):
                    run = startup(ct, 1, sizes[f"{tag}_nodes"], tag)
                    got[tag].append(dataclasses.asdict(run))
                    cpu = cluster_cpu(run.cpu)
                    log(
                        f"{tag.upper()} {ct.title} {r + 1}: {run.seconds:.2f} s"
                        + ("" if cpu is None else f"; controller + control plane {cpu:.1f} CPU s")
                    )
                if real:
                    ns = ct.namespace("s7")
                    base = (0 if ct is ours else 100) + r * S7_PER_ROUND
                    for k in range(S7_PER_ROUND):
                        got["s7"].append(one(ct, ns, trainer, c.RESTART_IN_PLACE, base + k))
                        log(
                            f"S7 {ct.title} {r + 1}.{k + 1}: {got['s7'][-1]:.2f} s from the "
                            "failure to attempt 1 past init (in place)"
                        )
                    ct.drop(ns)
    for ct in (ours, helpers):
        ct.close()

    def seconds(who: str, tag: str) -> list[float]:
        return [x if tag == "s7" else x["seconds"] for x in runs[who][tag]]

    by_round: dict[str, list[float]] = {}
    figures: dict[str, float] = {}
    for tag in ("s1", "s5", "s7"):
        with_, without = seconds(helpers.name, tag), seconds(ours.name, tag)
        by_round[tag] = [round(a / b, 3) for a, b in zip(with_, without, strict=True)]
        figures[f"helpers_{tag}_ratio"] = _median(with_) / _median(without)
    for tag in ("s1", "s5"):
        figures[f"helpers_{tag}_cpu_ratio"] = _cpu_per_1000(
            runs[helpers.name][tag]
        ) / _cpu_per_1000(runs[ours.name][tag])
    for tag, per in by_round.items():
        if per:
            log(f"{tag.upper()} with/without by round: " + ", ".join(f"{x:.2f}" for x in per))
    medians = {
        who: {tag: _finite(_median(seconds(who, tag))) for tag in ("s1", "s5", "s7")}
        for who in runs
    }
    wall = time.monotonic() - t_start
    out = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "sizes": {k: sizes[k] for k in ("s1_nodes", "s5_nodes")},
        "helpers_image": image,
        "delivery": "InitContainer",
        "rounds": ROUNDS,
        "s7_per_round": S7_PER_ROUND,
        "s7_left_out": left_out,
        "wall_s": round(wall, 1),
        "medians_s": medians,
        "by_round": by_round,
        "figures": {k: _finite(v) for k, v in figures.items()},
        "runs": runs,
    }
    (RESULTS / "helpers.json").write_text(json.dumps(out, indent=2) + "\n")
    log(f"helpers' cost: {wall / 60:.1f} min; runs in {RESULTS / 'helpers.json'}")
    spread = [
        f"helpers_{tag}_ratio={min(per):.2f}..{max(per):.2f}"
        for tag, per in by_round.items()
        if len(per) > 1
    ]
    print("SPREAD " + " ".join(spread), flush=True)
    print(result_line(figures), flush=True)
    return 0
