"""What a worker pod carries to be restarted in place (``spec.restartStrategy: InPlace``).
Pure: a pod manifest in, the same manifest with these additions out.

The kubelet (Kubernetes 1.35+, RestartAllContainers) restarts every container of a pod when a
container exits with a code one of its rules names, keeping the pod, its UID, IP, node and
volumes. The operator needs no credentials in the pod and no exec to use it:

* the pod's attempt is its annotation ``ddp-operator.io/attempt``, which the operator moves on;
  a second container (``ddp-attempt-watch``) reads it through a downward-API volume and exits
  86 once it differs from the attempt the container started with: its rule restarts every
  container of the pod;
* ``DDP_ATTEMPT`` is taken from the job's ConfigMap (``configMapKeyRef``, resolved at each start
  of a container from the kubelet's watch of it), which the operator moves on before any pod is
  told. Not from the annotation (``fieldRef``): the kubelet resolves that from the pod its pod
  worker holds, and a sync that began before the annotation moved, while a remount asked for by
  an earlier one wrote the new value into the volume, restarted the pod with the old one (seen
  on the real node: a pod ran the old ``DDP_ATTEMPT``, and restarted once more). Waiting 1.5 s
  before exiting kept that sync out, at 1.5 s of every restart (twice, where worker 0 goes
  first);
* it is a regular container, not a sidecar, so a trainer that ended leaves the pod running, its
  exit code on record: nothing restarts until the operator gives the pod its next attempt (a
  failed attempt never runs again), and a worker that finished can still be restarted with its
  group. Once the job has finished, the operator sets ``ddp-operator.io/finished`` and the watch
  exits 0: the pod ends Succeeded or Failed, as its trainer did.

The watch runs ``/bin/sh`` and ``sleep`` from the trainer's image (already on the node; no image
of ours to pull), as nobody, and passes Pod Security ``restricted``; an image without either is
found (``inplace_fallback``) and the job falls back to Recreate.
"""

from __future__ import annotations

from typing import Any

from ..model import constants as c
from .job_configmap import attempt_env

Manifest = dict[str, Any]

FINISHED = {c.FINISHED_ANNOTATION: "true"}  # the job has finished: the watch exits 0

ATTEMPT_DIR = "/ddp-attempt"  # the downward-API volume: the pod's two annotations
# Shell builtins but ``sleep``, which is checked (exit WATCH_LACKS_EXIT_CODE, saying so, read as
# a watch that cannot start: ``inplace_fallback``); a ``sleep`` without fractions (POSIX only
# asks for whole seconds) naps a second. TERM ends it at once (sh as PID 1 would ignore it). An
# annotation not set reads as empty: no attempt, never a new one.
WATCH_SCRIPT = f"""trap 'exit 0' TERM
command -v sleep >/dev/null 2>&1 || {{
  echo "no sleep command in the trainer's image (PATH=$PATH)"; exit {c.WATCH_LACKS_EXIT_CODE}; }}
nap=0.2
sleep "$nap" 2>/dev/null || nap=1
while :; do
  now=
  read -r now < {ATTEMPT_DIR}/attempt || :
  [ -z "$now" ] || [ "$now" = "${c.ENV_ATTEMPT}" ] || exit {c.RESTART_EXIT_CODE}
  [ -s {ATTEMPT_DIR}/finished ] && exit 0
  sleep "$nap"
done
"""
# Requests equal to limits keep a Guaranteed pod Guaranteed.
RESOURCES = {
    "requests": {"cpu": "20m", "memory": "32Mi"},
    "limits": {"cpu": "20m", "memory": "32Mi"},
}
SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _annotation(key: str) -> Manifest:
    return {"fieldPath": f"metadata.annotations['{key}']"}


def watch_container(trainer: Manifest, configmap: str) -> Manifest:
    """The container whose exit 86 restarts the pod in place."""
    return {
        "name": c.WATCH_CONTAINER,
        "image": trainer.get("image"),
        "imagePullPolicy": trainer.get("imagePullPolicy", "IfNotPresent"),
        "command": ["/bin/sh", "-c", WATCH_SCRIPT],
        "env": [attempt_env(configmap)],
        "resources": RESOURCES,
        "securityContext": SECURITY,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": c.ATTEMPT_VOLUME, "mountPath": ATTEMPT_DIR, "readOnly": True}],
        "restartPolicy": "OnFailure",  # killed (by OOM, by hand): it alone starts again
        "restartPolicyRules": [
            {
                "action": "RestartAllContainers",
                "exitCodes": {"operator": "In", "values": [c.RESTART_EXIT_CODE]},
            }
        ],
    }


def carried(pod: Manifest) -> bool:
    """Whether a pod (as built, or as the API server returned it) carries the watch's rule."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for rule in container.get("restartPolicyRules") or ():
            if rule.get("action") == "RestartAllContainers":
                return True
    return False


def make_in_place(pod: Manifest, trainer_at: int, attempt: int, configmap: str) -> None:
    """Add to a worker pod (``trainer_at``: its trainer's index) what in-place restarts need;
    ``configmap``: the job's, which says the attempt."""
    meta, spec = pod["metadata"], pod["spec"]
    trainer = spec["containers"][trainer_at]
    annotations = meta.setdefault("annotations", {})
    annotations[c.ATTEMPT_ANNOTATION] = str(attempt)
    annotations.setdefault(c.DEFAULT_CONTAINER_ANNOTATION, trainer["name"])  # kubectl logs
    trainer["env"] = [
        attempt_env(configmap) if e.get("name") == c.ENV_ATTEMPT else e
        for e in trainer.get("env") or []
    ]
    spec["containers"].append(watch_container(trainer, configmap))
    items = [
        {"path": "attempt", "fieldRef": _annotation(c.ATTEMPT_ANNOTATION)},
        {"path": "finished", "fieldRef": _annotation(c.FINISHED_ANNOTATION)},
    ]
    spec.setdefault("volumes", []).append(
        {"name": c.ATTEMPT_VOLUME, "downwardAPI": {"items": items}}
    )


def told(attempt: int, when: str, restarts: int) -> dict[str, str]:
    """The annotations that tell a pod its next attempt, with ``when`` (RFC 3339) and its
    trainer's restart count then (``restarts``): the restart is timed from the first and seen
    past the second (``decide.inplace``)."""
    return {
        c.ATTEMPT_ANNOTATION: str(attempt),
        c.TOLD_AT_ANNOTATION: when,
        c.TOLD_RESTARTS_ANNOTATION: str(restarts),
    }
