"""Benchmarks of ddp-operator against the API server's own limit (raw) and Kubeflow's training
operator (peer), all in one run on the same cluster. Ratios, not absolute times, are the result.

    python bench/run.py [--quick]      (make bench / make bench-quick, with the cluster up)

S1  one job of N workers (quick 64, full 256): apply -> every pod Running; median of 3.
S2  J jobs x 4 workers applied together (quick 50, full 200): apply -> every pod Running.
S3  K running jobs x 4 workers (quick 25, full 100) whose pods all succeed at once: per job, the
    time from its last pod's success to its Succeeded condition; p50 and p99.
And the operator's peak RSS and CPU seconds over S2 (a fresh operator process runs S2).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from ddp_operator import builders
from ddp_operator import constants as c
from ddp_operator.jobspec import resolve

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CONCURRENCY = 32  # the raw client's and our operator's API concurrency
TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "bench", "command": ["train"]}]}}
PEER_NS = "bench-peer"
OURS_PREFIX = "bench-ours-"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Cluster:
    def __init__(self) -> None:
        self.kubeconfig = os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig")
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.api.configuration.connection_pool_maxsize = 64
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def kubectl(self, *args: str, input: str | None = None) -> None:
        """Run the local cluster's kubectl (kubectl from PATH for another cluster)."""
        local = ROOT / ".cluster" / "bin" / "kubectl"
        binary = str(local) if local.exists() else "kubectl"
        subprocess.run(
            [binary, "--kubeconfig", self.kubeconfig, *args],
            check=True,
            capture_output=True,
            timeout=120,
            input=input.encode() if input is not None else None,
        )

    def namespace(self, name: str) -> str:
        with contextlib.suppress(client.exceptions.ApiException):
            self.core.create_namespace({"metadata": {"name": name}})
        deadline = time.monotonic() + 30
        while not self.core.list_namespaced_service_account(name).items:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no service account in {name}")
            time.sleep(0.1)
        return name

    def drop(self, ns: str, keep: bool = False) -> None:
        """Delete a namespace (or only its jobs, pods and services) and wait until it (or they)
        are gone, so that the next scenario starts on a quiet cluster."""
        if keep:
            for job in self.custom.list_namespaced_custom_object(
                "kubeflow.org", "v1", ns, "pytorchjobs"
            )["items"]:
                self.custom.delete_namespaced_custom_object(
                    "kubeflow.org", "v1", ns, "pytorchjobs", job["metadata"]["name"]
                )
            self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            for svc in self.core.list_namespaced_service(ns).items:
                with contextlib.suppress(client.exceptions.ApiException):  # GC may be first
                    self.core.delete_namespaced_service(svc.metadata.name, ns)
        else:
            with contextlib.suppress(client.exceptions.ApiException):
                self.core.delete_namespace(ns, propagation_policy="Background")
        deadline = time.monotonic() + 180
        while self.core.list_namespaced_pod(ns, limit=1).items or (
            not keep and self.core.list_namespace(field_selector=f"metadata.name={ns}").items
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{ns} not gone")
            time.sleep(0.2)


class PodWatch:
    """Watches the pods of a namespace; records when each is first Running and Succeeded."""

    def __init__(self, cluster: Cluster, ns: str, selector: str = ""):
        self.running: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._w = watch.Watch()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(cluster, ns, selector), daemon=True)
        self._thread.start()
        time.sleep(0.3)  # the watch is open before the measured action starts

    def _run(self, cluster: Cluster, ns: str, selector: str) -> None:
        try:
            self._stream(cluster, ns, selector)
            if not self._stop.is_set():  # the server ended it: what is waited for never comes
                raise RuntimeError(f"the API server ended the watch of pods in {ns}")
        except Exception as exc:  # the stream also breaks when close() stops it: no error then
            if not self._stop.is_set():
                with self._cond:
                    self.error = exc
                    self._cond.notify_all()

    def _stream(self, cluster: Cluster, ns: str, selector: str) -> None:
        for ev in self._w.stream(
            cluster.core.list_namespaced_pod,
            ns,
            label_selector=selector,
            timeout_seconds=600,
            _preload_content=False,
        ):
            now = time.monotonic()
            obj = ev["raw_object"] if "raw_object" in ev else ev["object"]
            meta, phase = obj["metadata"], (obj.get("status") or {}).get("phase")
            with self._cond:
                self.labels[meta["name"]] = meta.get("labels") or {}
                if phase == "Running":
                    self.running.setdefault(meta["name"], now)
                elif phase == "Succeeded":
                    self.succeeded.setdefault(meta["name"], now)
                self._cond.notify_all()
            if self._stop.is_set():
                return

    def wait(self, what: Callable[[], bool], timeout: float = 600) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.error is not None or what(), timeout=timeout):
                raise TimeoutError("pods did not get there in time")
            if self.error is not None:
                raise RuntimeError(f"the pod watch broke: {self.error!r}") from self.error

    def wait_running(self, n: int, timeout: float = 600) -> float:
        """Time (monotonic) when n pods had been seen Running."""
        self.wait(lambda: len(self.running) >= n, timeout)
        return max(self.running.values())

    def close(self) -> None:
        self._stop.set()
        self._w.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def our_operator(cluster: Cluster, pattern: str) -> Iterator[subprocess.Popen]:
    """`ddp-operator run`, exactly as users run it, in its own process."""
    port = free_port()
    logf = open(RESULTS / "operator.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ddp-operator"),
            "run",
            "--namespace",
            pattern,
            "--liveness",
            f"http://127.0.0.1:{port}/healthz",
            "--quiet",
        ],
        env={**os.environ, "KUBECONFIG": cluster.kubeconfig},
        stdout=logf,
        stderr=logf,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, time.monotonic() + 60, "operator.log")
        yield proc
    finally:
        stop(proc)
        logf.close()


def wait_http(url: str, proc: subprocess.Popen, deadline: float, log_name: str) -> None:
    """Wait until ``url`` answers, failing if the process exits or the deadline passes."""
    while True:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=1)
            return
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{url} did not answer; see bench/results/{log_name}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def proc_usage(pid: int) -> tuple[float, float]:
    """(peak RSS in MB, CPU seconds) of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return hwm / 1024, (int(fields[11]) + int(fields[12])) / ticks


def ddpjob(name: str, ns: str, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodes": nodes, "template": TEMPLATE},
    }


def pytorchjob(name: str, ns: str, nodes: int) -> dict[str, Any]:
    container = {"name": "pytorch", "image": "bench", "command": ["train"]}
    replica = lambda n: {  # noqa: E731
        "replicas": n,
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [container]}},
    }
    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pytorchReplicaSpecs": specs, "runPolicy": {"cleanPodPolicy": "None"}},
    }


def raw_objects(name: str, ns: str, nodes: int) -> list[dict[str, Any]]:
    """The Service and pods our operator would create, without the owner (no DDPJob exists)."""
    job = resolve(
        {
            "metadata": {"name": name, "namespace": ns, "uid": "raw"},
            "spec": {"nodes": nodes, "template": TEMPLATE},
        }
    )
    objs = [builders.build_service(job)] + [builders.build_worker_pod(job, i) for i in range(nodes)]
    for o in objs:
        o["metadata"].pop("ownerReferences", None)
    return objs


def drain(response: Any) -> None:
    """Read a raw response and return its connection to the pool (no TLS handshake per call)."""
    response.read()
    response.release_conn()


def create_raw(cluster: Cluster, pool: ThreadPoolExecutor, objs: list[dict[str, Any]]) -> None:
    def create(o: dict[str, Any]) -> None:
        ns = o["metadata"]["namespace"]
        if o["kind"] == "Service":
            drain(cluster.core.create_namespaced_service(ns, o, _preload_content=False))
        else:
            drain(cluster.core.create_namespaced_pod(ns, o, _preload_content=False))

    # Services first, as the operator does, then every pod concurrently.
    list(pool.map(create, [o for o in objs if o["kind"] == "Service"]))
    list(pool.map(create, [o for o in objs if o["kind"] == "Pod"]))


def create_jobs(cluster: Cluster, pool: ThreadPoolExecutor, jobs: list[dict[str, Any]]) -> None:
    def create(j: dict[str, Any]) -> None:
        group, version = j["apiVersion"].split("/")
        plural = "ddpjobs" if j["kind"] == c.KIND else "pytorchjobs"
        drain(
            cluster.custom.create_namespaced_custom_object(
                group, version, j["metadata"]["namespace"], plural, j, _preload_content=False
            )
        )

    list(pool.map(create, jobs))


def startup(
    cluster: Cluster, pool: ThreadPoolExecutor, system: str, jobs: int, nodes: int, ns: str
) -> float:
    """Seconds from the first create call to every pod Running, for one system."""
    pods = PodWatch(cluster, ns)
    try:
        t0 = time.monotonic()
        names = [f"j{k}-{uuid.uuid4().hex[:4]}" for k in range(jobs)]
        if system == "raw":
            objs = [o for n in names for o in raw_objects(n, ns, nodes)]
            create_raw(cluster, pool, objs)
        elif system == "ours":
            create_jobs(cluster, pool, [ddpjob(n, ns, nodes) for n in names])
        else:
            create_jobs(cluster, pool, [pytorchjob(n, ns, nodes) for n in names])
        return pods.wait_running(jobs * nodes) - t0
    finally:
        pods.close()


@contextlib.contextmanager
def peer_operator(cluster: Cluster, binary: str) -> Iterator[subprocess.Popen]:
    """Kubeflow's training operator v1 as its manifests run it (client QPS 20, burst 30),
    watching PEER_NS; its webhook certificates are handed to it as a pod mount would."""
    crd = Path(
        subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    version = Path(binary).parent.name.split("-")[2]
    crd = crd / f"github.com/kubeflow/training-operator@{version}/manifests/base/crds"
    cluster.kubectl("apply", "--server-side", "-f", str(crd / "kubeflow.org_pytorchjobs.yaml"))
    cluster.namespace("kubeflow")
    with contextlib.suppress(client.exceptions.ApiException):
        cluster.core.create_namespaced_secret(
            "kubeflow", {"metadata": {"name": "training-operator-webhook-cert"}}
        )
    admission = client.AdmissionregistrationV1Api(cluster.api)
    with contextlib.suppress(client.exceptions.ApiException):
        # Its CA gets injected here; it selects no object, so the API server never calls it.
        admission.create_validating_webhook_configuration(
            {
                "metadata": {"name": "validator.training-operator.kubeflow.org"},
                "webhooks": [
                    {
                        "name": "validator.pytorchjob.training-operator.kubeflow.org",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Ignore",
                        "objectSelector": {"matchLabels": {"never": "selected"}},
                        "clientConfig": {
                            "service": {"name": "training-operator", "namespace": "kubeflow"}
                        },
                        "rules": [
                            {
                                "apiGroups": ["kubeflow.org"],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pytorchjobs"],
                            }
                        ],
                    }
                ],
            }
        )
    certs = Path("/tmp/k8s-webhook-server/serving-certs")
    logf = open(RESULTS / "peer.log", "ab")  # noqa: SIM115
    mport, pport = free_port(), free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--namespace={PEER_NS}",
            "--enable-scheme=pytorchjob",
            f"--metrics-bind-address=127.0.0.1:{mport}",
            f"--health-probe-bind-address=127.0.0.1:{pport}",
            f"--webhook-server-port={free_port()}",
            "--zap-log-level=error",
        ],
        env={**os.environ, "KUBECONFIG": cluster.kubeconfig, "MY_POD_NAMESPACE": "kubeflow"},
        stdout=logf,
        stderr=logf,
    )
    deadline = time.monotonic() + 120
    try:
        while True:
            secret = cluster.core.read_namespaced_secret(
                "training-operator-webhook-cert", "kubeflow"
            )
            if secret.data and "tls.crt" in secret.data:
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("peer wrote no certificates; see bench/results/peer.log")
            time.sleep(0.5)
        certs.mkdir(parents=True, exist_ok=True)
        for key, value in secret.data.items():
            (certs / key).write_bytes(base64.b64decode(value))
        # Ready once its controllers run: its readyz check waits for the certificates.
        wait_http(f"http://127.0.0.1:{pport}/readyz", proc, deadline, "peer.log")
        yield proc
    finally:
        stop(proc)
        logf.close()


def completion(cluster: Cluster, pool: ThreadPoolExecutor, ns: str, jobs: int) -> list[float]:
    """S3: per job, ms from its last pod's success to its Succeeded condition."""
    names = [f"c{k}" for k in range(jobs)]
    pods = PodWatch(cluster, ns)
    done: dict[str, float] = {}
    stop = threading.Event()

    def watch_jobs() -> None:
        w = watch.Watch()
        for ev in w.stream(
            cluster.custom.list_namespaced_custom_object,
            c.GROUP,
            c.VERSION,
            ns,
            c.PLURAL,
            timeout_seconds=600,
        ):
            now = time.monotonic()
            obj = ev["object"]
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Succeeded" and cond["status"] == "True":
                    done.setdefault(obj["metadata"]["name"], now)
            if stop.is_set() or len(done) == jobs:
                w.stop()
                return

    watcher = threading.Thread(target=watch_jobs, daemon=True)
    watcher.start()
    try:
        create_jobs(cluster, pool, [ddpjob(n, ns, 4) for n in names])
        pods.wait_running(jobs * 4)
        time.sleep(1)  # every job has seen its pods Running
        annotate = {"metadata": {"annotations": {"kwok.ddp-operator.io/exit-code": "0"}}}
        list(
            pool.map(
                lambda p: cluster.core.patch_namespaced_pod(
                    p, ns, annotate, _preload_content=False
                ),
                list(pods.running),
            )
        )
        pods.wait(lambda: len(pods.succeeded) >= jobs * 4)
        watcher.join(timeout=120)
    finally:
        stop.set()
        pods.close()
    lat = []
    for n in names:
        last = max(t for p, t in pods.succeeded.items() if pods.labels[p].get(c.LABEL_JOB) == n)
        lat.append((done[n] - last) * 1000)
    return lat


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-peer", action="store_true", help="skip Kubeflow's operator")
    args = parser.parse_args()
    s1_nodes, s2_jobs, s3_jobs = (64, 50, 25) if args.quick else (256, 200, 100)
    RESULTS.mkdir(parents=True, exist_ok=True)
    cluster = Cluster()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/ddpjobs.ddp-operator.io")
    pool = ThreadPoolExecutor(CONCURRENCY)
    res: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "s1_nodes": s1_nodes,
        "s2_jobs": s2_jobs,
        "s3_jobs": s3_jobs,
    }
    peer_bin = (
        None
        if args.no_peer
        else subprocess.run(
            [str(ROOT / "bench/peer/build.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
    )

    def s1(system: str, make_ns: Callable[[int], str], keep: bool = False) -> list[float]:
        times = []
        for r in range(3):
            ns = make_ns(r)
            times.append(startup(cluster, pool, system, 1, s1_nodes, ns))
            log(f"S1 {system} run {r + 1}: {times[-1]:.2f}s")
            cluster.drop(ns, keep=keep)
        return times

    ours_ns = lambda tag: cluster.namespace(f"{OURS_PREFIX}{tag}-{uuid.uuid4().hex[:5]}")  # noqa: E731
    raw_ns = lambda tag: cluster.namespace(f"bench-raw-{tag}-{uuid.uuid4().hex[:5]}")  # noqa: E731

    log(f"S1: one job of {s1_nodes} workers, median of 3")
    res["s1_raw"] = s1("raw", lambda r: raw_ns("s1"))
    with our_operator(cluster, f"{OURS_PREFIX}*"):
        res["s1_ours"] = s1("ours", lambda r: ours_ns("s1"))
    if peer_bin:
        cluster.namespace(PEER_NS)
        with peer_operator(cluster, peer_bin):
            res["s1_peer"] = s1("peer", lambda r: PEER_NS, keep=True)

    log(f"S2: {s2_jobs} jobs x 4 workers applied together, median of 3")
    res["s2_raw"] = []
    for r in range(3):
        ns = raw_ns("s2")
        res["s2_raw"].append(startup(cluster, pool, "raw", s2_jobs, 4, ns))
        log(f"S2 raw run {r + 1}: {res['s2_raw'][-1]:.2f}s")
        cluster.drop(ns)
    with our_operator(cluster, f"{OURS_PREFIX}*") as op:
        res["s2_ours"], res["s2_rss_mb"], res["s2_cpu_s"] = [], 0.0, []
        for r in range(3):
            ns = ours_ns("s2")
            _, cpu0 = proc_usage(op.pid)
            res["s2_ours"].append(startup(cluster, pool, "ours", s2_jobs, 4, ns))
            rss, cpu1 = proc_usage(op.pid)
            res["s2_rss_mb"] = rss  # peak over the process's life: S1 is not run by this one
            res["s2_cpu_s"].append(cpu1 - cpu0)
            log(f"S2 ours run {r + 1}: {res['s2_ours'][-1]:.2f}s, CPU {cpu1 - cpu0:.1f}s")
            cluster.drop(ns)

        log(f"S3: {s3_jobs} running jobs x 4 workers succeed at once")
        ns = ours_ns("s3")
        lat = completion(cluster, pool, ns, s3_jobs)
        res["s3_ms"] = lat
        res["s3_p50_ms"], res["s3_p99_ms"] = percentile(lat, 50), percentile(lat, 99)
        cluster.drop(ns)

    med = statistics.median
    res["s1_ratio_raw"] = med(res["s1_ours"]) / med(res["s1_raw"])
    res["s2_ratio_raw"] = med(res["s2_ours"]) / med(res["s2_raw"])
    if "s1_peer" in res:
        res["s1_ratio_peer"] = med(res["s1_peer"]) / med(res["s1_ours"])
    (RESULTS / "latest.json").write_text(json.dumps(res, indent=2) + "\n")
    write_table(res)
    peer = res.get("s1_ratio_peer", float("nan"))
    print(
        f"RESULT s1_ratio_raw={res['s1_ratio_raw']:.2f} s1_ratio_peer={peer:.2f} "
        f"s2_ratio_raw={res['s2_ratio_raw']:.2f} s3_p99_ms={res['s3_p99_ms']:.0f} "
        f"rss_mb={res['s2_rss_mb']:.0f}",
        flush=True,
    )
    return 0


def write_table(res: dict[str, Any]) -> None:
    """The results table between the markers of bench/README.md."""
    med = statistics.median
    peer1 = f"{med(res['s1_peer']):.2f} s" if "s1_peer" in res else "n/a"
    ratio_peer = f"{res['s1_ratio_peer']:.1f}x faster than peer" if "s1_peer" in res else ""
    rows = [
        "| scenario | ours | raw | peer | ratios |",
        "|---|---|---|---|---|",
        f"| S1: 1 job x {res['s1_nodes']} workers, apply -> all Running (median of 3) | "
        f"{med(res['s1_ours']):.2f} s | {med(res['s1_raw']):.2f} s | {peer1} | "
        f"ours/raw {res['s1_ratio_raw']:.2f}; {ratio_peer} |",
        f"| S2: {res['s2_jobs']} jobs x 4 workers applied together, -> all Running (median of 3)"
        f" | {med(res['s2_ours']):.2f} s | {med(res['s2_raw']):.2f} s | - |"
        f" ours/raw {res['s2_ratio_raw']:.2f} |",
        f"| S3: {res['s3_jobs']} jobs, last pod Succeeded -> job Succeeded | p50 "
        f"{res['s3_p50_ms']:.0f} ms, p99 {res['s3_p99_ms']:.0f} ms | - | - | |",
        f"| operator over S2 | peak RSS {res['s2_rss_mb']:.0f} MB, CPU "
        f"{med(res['s2_cpu_s']):.1f} s per run | - | - | |",
    ]
    meta = (
        f"\n{'Quick run' if res['quick'] else 'Full run'} of {res['date']} on {res['machine']}.\n"
    )
    readme = ROOT / "bench" / "README.md"
    text = readme.read_text() if readme.exists() else "<!-- results -->\n<!-- /results -->\n"
    head, rest = text.split("<!-- results -->", 1)
    tail = rest.split("<!-- /results -->", 1)[1]
    readme.write_text(
        f"{head}<!-- results -->\n" + "\n".join(rows) + meta + f"<!-- /results -->{tail}"
    )


if __name__ == "__main__":
    sys.exit(main())
