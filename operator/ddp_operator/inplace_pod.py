"""What a worker pod carries to be restarted in place (``spec.restartStrategy: InPlace``).
Pure: a pod manifest in, the same manifest with these additions out.

The kubelet (Kubernetes 1.35+, RestartAllContainers) restarts every container of a pod when a
container exits with a code one of its rules names, keeping the pod, its UID, IP, node and
volumes. The operator needs no credentials in the pod and no exec to use it:

* the pod's attempt is its annotation ``ddp-operator.io/attempt``, which the operator moves on;
  the trainer's ``DDP_ATTEMPT`` is taken from it (``fieldRef``: resolved at each start);
* a sidecar (``ddp-attempt-watch``) reads the annotation through a downward-API volume and exits
  86 once it differs from the attempt the pod started for: its rule restarts the pod;
* the trainer's rule restarts the pod when it exits non-zero, so the pod never fails on its own;
* a gate (``ddp-attempt-gate``, the first init container) lets a restarted pod start only once
  the operator has given it a new attempt (recorded in an emptyDir, which a restart keeps), so
  no process of a failed attempt runs again, and ``DDP_ATTEMPT`` is right in every process.

Both helpers run ``/bin/sh`` from the trainer's image (already on the node; no image of ours to
pull), as nobody, and pass Pod Security ``restricted``.
"""

from __future__ import annotations

from typing import Any

from . import constants as c

Manifest = dict[str, Any]

ATTEMPT_DIR = "/ddp-attempt"  # the downward-API volume: the pod's attempt annotation
STATE_DIR = "/ddp-attempt-state"  # the emptyDir: the attempt the pod last started for
# The gate waits while the attempt given is the one it last started for (a restart nobody asked
# for: a failure); then records it. TERM ends it at once (sh as PID 1 would ignore it).
GATE_SCRIPT = f"""trap 'exit 143' TERM
read -r now < {ATTEMPT_DIR}/value
if [ -f {STATE_DIR}/started ]; then
  read -r last < {STATE_DIR}/started
  while [ "$now" = "$last" ]; do sleep 0.2; read -r now < {ATTEMPT_DIR}/value; done
fi
echo "$now" > {STATE_DIR}/started
"""
WATCH_SCRIPT = f"""trap 'exit 0' TERM
read -r mine < {STATE_DIR}/started
while :; do
  read -r now < {ATTEMPT_DIR}/value
  [ "$now" = "$mine" ] || exit {c.RESTART_EXIT_CODE}
  sleep 0.2
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


def restart_all_on(operator: str, codes: list[int]) -> list[Manifest]:
    """A container's rule: the kubelet restarts the whole pod in place on these exit codes."""
    return [
        {
            "action": "RestartAllContainers",
            "exitCodes": {"operator": operator, "values": codes},
        }
    ]


def _helper(name: str, script: str, trainer: Manifest) -> Manifest:
    return {
        "name": name,
        "image": trainer.get("image"),
        "imagePullPolicy": trainer.get("imagePullPolicy", "IfNotPresent"),
        "command": ["/bin/sh", "-c", script],
        "resources": RESOURCES,
        "securityContext": SECURITY,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": c.ATTEMPT_VOLUME, "mountPath": ATTEMPT_DIR, "readOnly": True},
            {"name": c.STATE_VOLUME, "mountPath": STATE_DIR},
        ],
    }


def attempt_env() -> Manifest:
    """``DDP_ATTEMPT`` from the pod's own annotation: resolved each time the container starts."""
    path = f"metadata.annotations['{c.ATTEMPT_ANNOTATION}']"
    return {"name": c.ENV_ATTEMPT, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def carried(pod: Manifest) -> bool:
    """Whether a pod (as built, or as the API server returned it) carries the trainer's rule."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for rule in container.get("restartPolicyRules") or ():
            if rule.get("action") == "RestartAllContainers":
                return True
    return False


def make_in_place(pod: Manifest, trainer_at: int, attempt: int) -> None:
    """Add to a worker pod (``trainer_at``: its trainer's index) what in-place restarts need."""
    meta, spec = pod["metadata"], pod["spec"]
    meta.setdefault("annotations", {})[c.ATTEMPT_ANNOTATION] = str(attempt)
    trainer = spec["containers"][trainer_at]
    trainer["env"] = [
        attempt_env() if e.get("name") == c.ENV_ATTEMPT else e for e in trainer.get("env") or []
    ]
    trainer["restartPolicy"] = "Never"
    trainer["restartPolicyRules"] = [
        *(trainer.get("restartPolicyRules") or []),
        *restart_all_on("NotIn", [0]),
    ]
    watch = _helper(c.WATCH_CONTAINER, WATCH_SCRIPT, trainer)
    watch["restartPolicy"] = "Always"
    watch["restartPolicyRules"] = restart_all_on("In", [c.RESTART_EXIT_CODE])
    gate = _helper(c.GATE_CONTAINER, GATE_SCRIPT, trainer)
    spec["initContainers"] = [gate, watch, *(spec.get("initContainers") or [])]
    item = {
        "path": "value",
        "fieldRef": {"fieldPath": f"metadata.annotations['{c.ATTEMPT_ANNOTATION}']"},
    }
    spec.setdefault("volumes", []).extend(
        [
            {"name": c.ATTEMPT_VOLUME, "downwardAPI": {"items": [item]}},
            {"name": c.STATE_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}},
        ]
    )
