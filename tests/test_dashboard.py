"""The Grafana dashboard the chart ships: valid JSON whose every query names metrics the
operator exports (read from its Prometheus registry, not from a list kept by hand)."""

from __future__ import annotations

import json
import re

from prometheus_client import REGISTRY

from ddp_operator.api import metrics

from harness.cluster import ROOT

DASHBOARD = ROOT / "charts" / "ddp-operator" / "dashboards" / "ddp-operator.json"
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}


def exported() -> set[str]:
    families = [*REGISTRY.collect(), *metrics.JobsByPhase(lambda: []).collect()]
    return {
        f.name + suffix
        for f in families
        if f.name.startswith("ddp_")
        for suffix in SUFFIXES.get(f.type, [""])
    }


def test_every_query_names_metrics_the_operator_exports() -> None:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    queries += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    names = exported()
    assert {"ddp_job_progress_ratio", "ddp_operator_group_restarts_total"} <= names
    for query in queries:
        used = set(re.findall(r"\b(ddp_[a-z_]+)\b", query))
        assert used and used <= names, (query, used - names)
    panels = {p["title"] for p in board["panels"]}
    assert {"Training progress", "ETA", "Loss", "Samples per second"} <= panels
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
