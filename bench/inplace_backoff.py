"""How long the kubelet takes to restart a pod in place (``restartPolicyRules`` action
``RestartAllContainers``, KEP-5532) for its restarts 1..N back to back, against deleting and
recreating a plain pod: does crash-loop back-off apply to in-place restarts, and how much?

The pod is the operator's in-place worker (``inplace_pod.make_in_place``: a ``trainer`` and the
``ddp-attempt-watch`` container whose exit 86 restarts every container) on the local cluster's
real node; restart n is given as the operator gives it: the job's ConfigMap's ``DDP_ATTEMPT``
set to n, then the pod's ``ddp-operator.io/attempt`` annotation. Measured from the annotation
patch until the trainer's restartCount has grown and it runs, on a watch of the pod; what the
container statuses said meanwhile is printed beside each time.

    KUBECONFIG=.cluster/kubeconfig .venv/bin/python bench/inplace_backoff.py [--restarts 6]

Needs the real node (``make cluster-up``) and the trainer image on it
(``hack/cluster/realnode.sh trainer``). Uses namespace ``m41-backoff``, deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))

from ddp_operator.manifests.inplace_pod import make_in_place  # noqa: E402
from ddp_operator.model import constants as c  # noqa: E402

NS = "m41-backoff"
CONFIGMAP = "bench-ddp-env"
POD = "bench-inplace"
PLAIN = "bench-plain"
ON_REAL_NODE = {"kubernetes.io/hostname": "real-node-0"}
# TERM ends the trainer at once (a shell as PID 1 ignores it; sleep would wait out the grace).
TRAINER_SCRIPT = "trap 'exit 0' TERM; sleep 3600 & wait $!"
TIMEOUT = 600.0  # seconds one awaited state may take: over the kubelet's 300 s back-off cap

Pod = client.V1Pod
Manifest = dict[str, Any]


def trainer_image() -> str:
    """The trainer image's name (built or reused, and imported on the real node)."""
    script = ROOT / "hack" / "cluster" / "realnode.sh"
    done = subprocess.run([str(script), "trainer"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def pod_manifest(name: str, image: str, in_place: bool) -> Manifest:
    """A worker-like pod for the real node: one ``trainer`` container, restartPolicy Never (as
    the operator's), made in place (the watch container, its rule, the downward-API volume)
    when ``in_place``."""
    trainer = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", TRAINER_SCRIPT],
        "env": [{"name": c.ENV_ATTEMPT, "value": "0"}],
    }
    pod: Manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "nodeSelector": ON_REAL_NODE,
            "containers": [trainer],
        },
    }
    if in_place:
        make_in_place(pod, 0, 0, CONFIGMAP)
    return pod


def status_of(pod: Pod, container: str) -> client.V1ContainerStatus | None:
    for s in pod.status.container_statuses or ():
        if s.name == container:
            return s
    return None


def describe(pod: Pod) -> list[str]:
    """The pod's container statuses in words: ``name: state reason (message)``."""
    words = []
    for s in pod.status.container_statuses or ():
        if s.state.waiting:
            w = s.state.waiting
            state = f"waiting {w.reason}" + (f" ({w.message})" if w.message else "")
        elif s.state.terminated:
            t = s.state.terminated
            state = f"terminated {t.reason} exit {t.exit_code}"
        elif s.state.running:
            state = "running"
        else:
            state = "no state"
        words.append(f"{s.name}: {state}")
    for cond in pod.status.conditions or ():
        if cond.type == "AllContainersRestarting" and cond.status == "True":
            words.append("condition AllContainersRestarting")
    return words


def watch_exit(pod: Pod) -> datetime | None:
    """When the watch container last exited, while its exit is its state (the kubelet clears
    finishedAt from lastState once it restarts every container)."""
    s = status_of(pod, c.WATCH_CONTAINER)
    return s.state.terminated.finished_at if s and s.state.terminated else None


@dataclass
class Waited:
    """What a wait on a pod saw."""

    pod: Pod | None = None
    seen: list[str] = field(default_factory=list)  # distinct descriptions, in order
    exited: datetime | None = None  # the watch container's exit (``watch_exit``)
    exit_seen: float | None = None  # time.monotonic() when that exit was first seen


def pod_events(api: client.CoreV1Api, name: str, since: str) -> Iterator[tuple[str, Pod]]:
    """The events of pod ``name`` from resourceVersion ``since`` (type, pod), for TIMEOUT
    seconds at most; a watch the API server ends is taken up again from its last event."""
    deadline = time.monotonic() + TIMEOUT
    rv = since
    while (left := deadline - time.monotonic()) > 0:
        w = watch.Watch()
        for event in w.stream(
            api.list_namespaced_pod,
            NS,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=max(1, int(left)),
            allow_watch_bookmarks=True,
        ):
            if event["type"] == "ERROR":
                raise RuntimeError(f"watch of pod {name}: {event['raw_object']}")
            rv = event["object"].metadata.resource_version
            yield event["type"], event["object"]
    raise TimeoutError(f"pod {name}: nothing awaited came in {TIMEOUT:.0f} s")


def wait_pod(api: client.CoreV1Api, name: str, done: Callable[[Pod], bool], since: str) -> Waited:
    """Watch pod ``name`` from resourceVersion ``since`` until ``done`` holds of it."""
    waited = Waited()
    for kind, pod in pod_events(api, name, since):
        if kind in ("BOOKMARK", "DELETED"):
            continue
        waited.pod = pod
        for line in describe(pod):
            if line not in waited.seen:
                waited.seen.append(line)
        if waited.exited is None and (exited := watch_exit(pod)):
            waited.exited, waited.exit_seen = exited, time.monotonic()
        if done(pod):
            return waited
    raise AssertionError("unreachable: pod_events raises when it runs out")


def trainer_running(restarts: int) -> Callable[[Pod], bool]:
    """Whether the trainer runs and has restarted more than ``restarts`` times."""

    def done(pod: Pod) -> bool:
        s = status_of(pod, "trainer")
        return s is not None and s.restart_count > restarts and s.state.running is not None

    return done


def wait_gone(api: client.CoreV1Api, name: str, since: str) -> None:
    """Wait until pod ``name`` is deleted (watched from ``since``)."""
    for kind, _ in pod_events(api, name, since):
        if kind == "DELETED":
            return


def in_place_restarts(api: client.CoreV1Api, image: str, restarts: int) -> list[Manifest]:
    """Restart the in-place pod ``restarts`` times back to back; one row per restart."""
    api.create_namespaced_config_map(
        NS, {"metadata": {"name": CONFIGMAP}, "data": {c.ENV_ATTEMPT: "0"}}
    )
    created = api.create_namespaced_pod(NS, pod_manifest(POD, image, in_place=True))
    pod = wait_pod(api, POD, trainer_running(-1), created.metadata.resource_version).pod
    rows = []
    for n in range(1, restarts + 1):
        before = status_of(pod, "trainer")
        api.patch_namespaced_config_map(CONFIGMAP, NS, {"data": {c.ENV_ATTEMPT: str(n)}})
        start = time.monotonic()
        patched = api.patch_namespaced_pod(
            POD, NS, {"metadata": {"annotations": {c.ATTEMPT_ANNOTATION: str(n)}}}
        )
        waited = wait_pod(
            api, POD, trainer_running(before.restart_count), patched.metadata.resource_version
        )
        took = time.monotonic() - start
        pod = waited.pod
        trainer = status_of(pod, "trainer")
        watcher = status_of(pod, c.WATCH_CONTAINER)
        started = trainer.state.running.started_at
        rows.append(
            {
                "n": n,
                "seconds": took,
                # The annotation's way to the watch container (downward-API volume, its poll).
                "to_exit": waited.exit_seen - start if waited.exit_seen else None,
                "started": started,
                # The kubelet's own gap: the watch container's exit 86 to the trainer's start.
                "gap": (started - waited.exited).total_seconds() if waited.exited else None,
                "restarts": (trainer.restart_count, watcher.restart_count),
                "seen": [s for s in waited.seen if not s.endswith(": running")],
            }
        )
    return rows


def recreate(api: client.CoreV1Api, image: str, times: int) -> list[tuple[float, float]]:
    """Delete and recreate the plain pod ``times`` times; (seconds to delete, seconds from
    create to running) each."""
    created = api.create_namespaced_pod(NS, pod_manifest(PLAIN, image, in_place=False))
    wait_pod(api, PLAIN, trainer_running(-1), created.metadata.resource_version)
    rows = []
    for _ in range(times):
        start = time.monotonic()
        deleting = api.delete_namespaced_pod(PLAIN, NS)
        wait_gone(api, PLAIN, deleting.metadata.resource_version)
        gone = time.monotonic()
        created = api.create_namespaced_pod(NS, pod_manifest(PLAIN, image, in_place=False))
        wait_pod(api, PLAIN, trainer_running(-1), created.metadata.resource_version)
        rows.append((gone - start, time.monotonic() - gone))
    return rows


def delete_namespace(api: client.CoreV1Api) -> None:
    """Delete the namespace and wait until it is gone."""
    since = api.read_namespace(NS).metadata.resource_version
    api.delete_namespace(NS)
    w = watch.Watch()
    for event in w.stream(
        api.list_namespace,
        field_selector=f"metadata.name={NS}",
        resource_version=since,
        timeout_seconds=int(TIMEOUT),
    ):
        if event["type"] == "DELETED":
            w.stop()
            return
    raise TimeoutError(f"namespace {NS}: not deleted in {TIMEOUT:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=6, help="in-place restarts in a row")
    parser.add_argument("--recreates", type=int, default=3, help="plain-pod recreates")
    args = parser.parse_args()
    config.load_kube_config(os.environ.get("KUBECONFIG", str(ROOT / ".cluster" / "kubeconfig")))
    api = client.CoreV1Api()
    image = trainer_image()
    node = api.read_node("real-node-0").status.node_info.kubelet_version
    print(f"kubelet {node}, image {image}")
    api.create_namespace({"metadata": {"name": NS}})
    try:
        rows = in_place_restarts(api, image, args.restarts)
        baseline = recreate(api, image, args.recreates)
    finally:
        delete_namespace(api)

    print("\nin place (annotation patch -> trainer restarted and running)")
    print(f"{'n':>2} {'seconds':>7} {'to exit':>7} {'gap':>3} restarts started  seen")
    for r in rows:
        gap = f"{r['gap']:.0f}" if r["gap"] is not None else "-"
        to_exit = f"{r['to_exit']:.1f}" if r["to_exit"] is not None else "-"
        restarts = "{}/{}".format(*r["restarts"])
        started = r["started"].strftime("%H:%M:%S")
        seen = "; ".join(r["seen"]) or "-"
        print(
            f"{r['n']:>2} {r['seconds']:>7.1f} {to_exit:>7} {gap:>3} {restarts:>8} {started} {seen}"
        )
    print("\nrecreate (delete -> gone, create -> trainer running)")
    for i, (gone, run) in enumerate(baseline, 1):
        print(f"{i:>2} delete {gone:5.1f} s  create {run:5.1f} s  total {gone + run:5.1f} s")


if __name__ == "__main__":
    main()
