"""What gang scheduling costs: one DDPJob of N workers (default 64), apply -> every pod Running,
with each gang mode the cluster can run against no gang, all in one run on the same cluster;
median of 3 each. The result is the ratio gang/none per mode.

    python bench/gang.py [--nodes N]      (make bench-gang, with the cluster up)

Modes: none, Kubernetes (the in-tree scheduler's Workload and PodGroup: the local cluster
serves them), Coscheduling (scheduler-plugins' scheduler and its PodGroup;
hack/cluster/coscheduling.sh up first), Volcano (its scheduler, controllers and webhooks;
hack/cluster/volcano.sh up first) and Kueue (the job labelled with a LocalQueue of a ClusterQueue
large enough: Kueue admits the 64-pod group, then the scheduler places it; hack/cluster/kueue.sh
up first); make bench-gang starts all three on the local cluster. A mode whose API the cluster
does not serve is listed as not run, with the reason; it is never counted as a result.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from ddp_operator.manifests import gang
from ddp_operator.model import constants as c

from cluster import CONCURRENCY, RESULTS, ROOT, Cluster, log
from contenders.base import drain
from contenders.ours import PREFIX, ddpjob, operator
from podwatch import PodWatch

KUEUE = "Kueue"
KUEUE_API = ("kueue.x-k8s.io", "v1beta2")
MODES = ("none", c.GANG_KUBERNETES, c.GANG_COSCHEDULING, c.GANG_VOLCANO, KUEUE)
BENCH_QUEUE = "ddp-bench"


def served(cluster: Cluster, mode: str) -> bool:
    """Whether the cluster serves the API group and version of the mode's objects (for Kueue:
    and its pod webhook is registered, i.e. kueue.sh or an install runs it)."""
    if mode == "none":
        return True
    group, version = KUEUE_API if mode == KUEUE else gang.APIS[mode][:2]
    groups = client.ApisApi(cluster.api).get_api_versions().groups
    if not any(v.group_version == f"{group}/{version}" for g in groups for v in g.versions):
        return False
    if mode != KUEUE:
        return True
    hooks = client.AdmissionregistrationV1Api(cluster.api).list_mutating_webhook_configuration()
    return any(w.name == "mpod.kb.io" for h in hooks.items for w in h.webhooks or [])


def needs(mode: str) -> str:
    if mode == KUEUE:
        return "Kueue with its pod integration (hack/cluster/kueue.sh up)"
    return gang.needs(mode)


def kueue_queue(cluster: Cluster, ns: str) -> None:
    """A ClusterQueue that admits any bench job at once, and its LocalQueue in ``ns``."""
    api = "/".join(KUEUE_API)
    quota = [("cpu", "100k"), ("memory", "100Ti"), ("pods", "100k")]
    objects = [
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": BENCH_QUEUE}},
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": {"name": BENCH_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [r for r, _ in quota],
                        "flavors": [
                            {
                                "name": BENCH_QUEUE,
                                "resources": [{"name": r, "nominalQuota": q} for r, q in quota],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": api,
            "kind": "LocalQueue",
            "metadata": {"name": BENCH_QUEUE, "namespace": ns},
            "spec": {"clusterQueue": BENCH_QUEUE},
        },
    ]
    for obj in objects:
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))


def release_kueue_pods(cluster: Cluster, ns: str) -> None:
    """Delete the namespace's jobs and wait for their pods to go: Kueue's finalizer holds them
    until the operator, told of the deletion, marks them (a namespace being deleted is no longer
    watched by the operator, so dropping it at once would leave them Terminating)."""
    cluster.custom.delete_collection_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL)
    deadline = time.monotonic() + 120
    while cluster.core.list_namespaced_pod(ns).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the pods of {ns} are still there 120 s after their job went")
        time.sleep(0.5)


def job(name: str, ns: str, nodes: int, mode: str) -> dict[str, Any]:
    manifest = ddpjob(name, ns, nodes)
    if mode == KUEUE:
        manifest["metadata"]["labels"] = {c.KUEUE_QUEUE_LABEL: BENCH_QUEUE}
    elif mode != "none":
        manifest["spec"]["gangScheduling"] = {"scheduler": mode}
    return manifest


def startup(cluster: Cluster, pool: ThreadPoolExecutor, ns: str, nodes: int, mode: str) -> float:
    """Seconds from the create call to every pod Running."""
    pods = PodWatch(cluster, ns)
    try:
        t0 = time.monotonic()
        body = job(f"g-{uuid.uuid4().hex[:4]}", ns, nodes, mode)
        drain(
            cluster.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, ns, c.PLURAL, body, _preload_content=False
            )
        )
        return pods.wait_running(nodes, f"{mode}: 1 job x {nodes} workers -> Running") - t0
    finally:
        pods.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    cluster = Cluster()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/ddpjobs.ddp-operator.io")
    cluster.bench_nodes()
    pool = ThreadPoolExecutor(CONCURRENCY)
    res: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    res["nodes"] = args.nodes
    with operator(cluster.kubeconfig):
        for mode in MODES:
            if not served(cluster, mode):
                res[mode] = f"not run: {needs(mode)} is not installed"
                log(f"{mode}: {res[mode]}")
                continue
            times = []
            for r in range(3):
                ns = cluster.namespace(f"{PREFIX}gang-{uuid.uuid4().hex[:5]}")
                if mode == KUEUE:
                    kueue_queue(cluster, ns)
                times.append(startup(cluster, pool, ns, args.nodes, mode))
                log(f"{mode} run {r + 1}: {times[-1]:.2f}s")
                if mode == KUEUE:  # the job first, while the operator still sees it
                    release_kueue_pods(cluster, ns)
                cluster.drop(ns)
            res[mode] = times
    base = statistics.median(res["none"])
    ratios = {
        m: statistics.median(t) / base for m, t in res.items() if m in MODES and isinstance(t, list)
    }
    res["ratios"] = ratios
    (RESULTS / "gang.json").write_text(json.dumps(res, indent=2) + "\n")
    print(
        "RESULT "
        + " ".join(f"{m.lower()}_ratio={r:.2f}" for m, r in ratios.items() if m != "none")
        + f" none_s={base:.2f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
