"""Pod lifecycle under test control, on the local cluster's fake (kwok) nodes.

Scheduled pods become Running and stay Running (the ``pod-run`` stage in
``hack/cluster/manifests/stages.yaml``) until a test ends them, in one of two ways:

* ``finish(..., via="stage")`` annotates the pod ``kwok.ddp-operator.io/exit-code: "<n>"``; the
  ``pod-finish`` stage then terminates its containers with exit code n (Succeeded for 0, Failed
  otherwise), as a kubelet would report it;
* ``finish(..., via="status")`` writes the same terminal status straight to the pod's status
  subresource (works on any cluster whose node has no kubelet fighting back).

``stall`` plays the kubelet of a pod whose container cannot start (a mistyped image...): it marks
the pod so that no stage plays for it any more and writes it back to Pending, the container
waiting with the kubelet's reason and message; ``unstall`` unmarks it, and the ``pod-run`` stage
starts it, as a kubelet whose next try succeeds.

``delete`` deletes a pod (kwok's ``pod-delete`` stage completes the deletion at once) and
``lose_node`` deletes a Node object, after which the controller manager's pod garbage collector
removes the pods bound to it, as after a real node loss (a node of the test's ``pool``: the
cluster's shared fake nodes are registered again by every `make cluster-up`, `make demo` too).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .cluster import ROOT, Cluster, wait_for
from .nodes import SILENCED

EXIT_CODE_ANNOTATION = "kwok.ddp-operator.io/exit-code"
NODES_FILE = ROOT / "hack" / "cluster" / "manifests" / "nodes.yaml"
# A test's own pool of fake GPU nodes (conftest's ``pool``): labelled and tainted with this key.
POOL_LABEL = "ddp-operator.io/test-pool"
GPUS = {"resource": "nvidia.com/gpu", "perNode": 8}


def on_pool(pool: str) -> dict[str, Any]:
    """A worker template that runs on the test's pool of nodes (and nowhere else)."""
    return {
        "spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": pool}],
            "containers": [{"name": "trainer", "image": "python:3.11-slim"}],
        }
    }


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get(cluster: Cluster, ns: str, name: str) -> Any | None:
    """The pod as a dict, or None."""
    pods = cluster.core.list_namespaced_pod(ns, field_selector=f"metadata.name={name}")
    items = cluster.api.sanitize_for_serialization(pods).get("items") or []
    return items[0] if items else None


def list_pods(cluster: Cluster, ns: str, selector: str = "") -> list[dict[str, Any]]:
    """Pods of a namespace as dicts."""
    pods = cluster.core.list_namespaced_pod(ns, label_selector=selector)
    return cluster.api.sanitize_for_serialization(pods).get("items") or []


def phase(cluster: Cluster, ns: str, name: str) -> str | None:
    pod = get(cluster, ns, name)
    return (pod.get("status") or {}).get("phase") if pod else None


def wait_phase(cluster: Cluster, ns: str, name: str, want: str, timeout: float = 60) -> dict:
    """Wait until the pod is in phase ``want``; return it."""
    return wait_for(
        lambda: (
            (p := get(cluster, ns, name)) and (p.get("status") or {}).get("phase") == want and p
        ),
        timeout=timeout,
        what=f"pod {ns}/{name} to be {want}",
    )


def finish(
    cluster: Cluster,
    ns: str,
    name: str,
    exit_code: int,
    via: str = "stage",
    uid: str | None = None,
    message: str | None = None,
) -> None:
    """End a Running pod's containers with ``exit_code`` (see the module docstring). With
    ``uid``, only that pod: the API server refuses (422, uid immutable) a newer pod of that name.
    ``message``: their termination message (``via="status"`` only)."""
    assert message is None or via == "status", "a message is written with the status"
    guard = {"uid": uid} if uid else {}
    if via == "stage":
        cluster.core.patch_namespaced_pod(
            name,
            ns,
            {"metadata": {**guard, "annotations": {EXIT_CODE_ANNOTATION: str(exit_code)}}},
        )
        return
    pod = get(cluster, ns, name)
    assert pod is not None, f"pod {ns}/{name} not found"
    now = _now()
    statuses = [
        {
            "name": ct["name"],
            "image": ct.get("image") or "none",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": now,
                    "finishedAt": now,
                    **({"message": message} if message is not None else {}),
                }
            },
        }
        for ct in pod["spec"]["containers"]
    ]
    cluster.core.patch_namespaced_pod_status(
        name,
        ns,
        {
            "metadata": guard,
            "status": {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": statuses,
            },
        },
    )


def stall(cluster: Cluster, ns: str, name: str, reason: str, message: str) -> None:
    """Leave the pod Pending, its first container waiting with ``reason`` and ``message``."""
    cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {SILENCED: _now()}}})
    pod = get(cluster, ns, name)
    assert pod is not None, f"pod {ns}/{name} not found"
    first = pod["spec"]["containers"][0]
    waiting = {
        "name": first["name"],
        "image": first.get("image") or "none",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": reason, "message": message}},
    }
    status = {
        "phase": "Pending",
        "conditions": [
            {"type": kind, "status": "False", "reason": "ContainersNotReady"}
            for kind in ("Ready", "ContainersReady")
        ],
        "containerStatuses": [waiting],
    }
    cluster.core.patch_namespaced_pod_status(name, ns, {"status": status})


def unstall(cluster: Cluster, ns: str, name: str) -> None:
    """Let the ``pod-run`` stage start a stalled pod again."""
    cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {SILENCED: None}}})


def delete(cluster: Cluster, ns: str, name: str) -> None:
    cluster.core.delete_namespaced_pod(name, ns)


def lose_node(cluster: Cluster, node: str) -> None:
    """Take a node away: delete its Node object."""
    cluster.core.delete_node(node)


def trainer_env(cluster: Cluster, pod: dict[str, Any]) -> dict[str, str]:
    """A worker pod's trainer env as its kubelet resolves it, from the ConfigMaps it reads as
    they are on the cluster now (``envFrom`` and ``configMapKeyRef``)."""
    from ddp_operator.manifests import builders, worker_env

    spec, ns = pod["spec"], pod["metadata"]["namespace"]
    trainer = spec["containers"][builders.trainer_index(spec)]
    names = {(e.get("configMapRef") or {}).get("name") for e in trainer.get("envFrom") or ()}
    for entry in trainer.get("env") or ():
        names.add(((entry.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name"))
    configmaps = {n: cluster.core.read_namespaced_config_map(n, ns).data or {} for n in names if n}
    env, missing = worker_env.resolve(trainer, configmaps)
    assert not missing, missing
    return env
