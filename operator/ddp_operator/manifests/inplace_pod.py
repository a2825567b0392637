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
* the kubelet's copy of that ConfigMap can lag the pod it syncs (two watches; seen in CI: a
  trainer restarted for attempt 2 read 1, ran attempt 1's code and failed as it had). So the
  watch's volume is projected from the annotations *and* the ConfigMap's ``DDP_ATTEMPT``
  (``given``), which the kubelet writes from that same copy in the same remount: the watch exits
  86 only once ``given`` says the attempt the annotation says, and the containers it restarts
  then read it. A ConfigMap without that key (or none) leaves the file out, and the watch goes
  by the annotation alone, as before;
* it is a regular container, not a sidecar, so a trainer that ended leaves the pod running, its
  exit code on record: nothing restarts until the operator gives the pod its next attempt (a
  failed attempt never runs again), and a worker that finished can still be restarted with its
  group. Once the job has finished, the operator sets ``ddp-operator.io/finished`` and the watch
  exits 0: the pod ends Succeeded or Failed, as its trainer did;
* without the operator (down, or gone), a pod whose trainer ended still ends, and gives back its
  devices: the pod's containers share one process namespace, and the watch exits 0 once its
  trainer's processes (all but its own and the sandbox's) have been gone for
  ``RELEASE_AFTER_SECONDS`` (300) with no new attempt. Its group, if it restarts later, is
  recreated. A template that sets ``shareProcessNamespace: false`` keeps its pods until told.

* the watch also says whether its trainer's processes are quiet (a hang in a script that
  reports no progress: ``decide.quiet``): every QUIET_WINDOW_SECONDS it reads each process's CPU
  time (``/proc/<pid>/stat``, readable by all) and writes ``quiet`` to its own volume when none
  used QUIET_PERCENT of a core in the window, once one had used more (a pod that never computed,
  such as ``sleep infinity``, is never quiet); its readiness probe fails while it says so. The
  pod's ContainersReady condition then says since when; nothing else reads it (the job's
  Service publishes pods not ready).

The watch runs ``/bin/sh`` and ``sleep``, as nobody, and passes Pod Security ``restricted``: from
the operator's image where its helpers are delivered (``helpers_pod``: any trainer image restarts
in place), else from the trainer's, where an image without either is found
(``inplace_fallback``) and the job falls back to Recreate.
"""

from __future__ import annotations

from typing import Any

from ..model import constants as c
from .job_configmap import attempt_env

Manifest = dict[str, Any]

FINISHED = {c.FINISHED_ANNOTATION: "true"}  # the job has finished: the watch exits 0

ATTEMPT_DIR = (
    "/ddp-attempt"  # the watch's volume: the pod's two annotations, the ConfigMap's attempt
)
PROC_DIR = "/proc"  # the pod's processes, the watch sharing their namespace
ACTIVITY_DIR = "/ddp-activity"  # the watch's own volume: ``quiet`` says its judgement


def watch_script(
    release_after: int = c.RELEASE_AFTER_SECONDS, window: int = c.QUIET_WINDOW_SECONDS
) -> str:
    """What the watch runs: shell builtins but ``sleep``, which is checked (exit
    WATCH_LACKS_EXIT_CODE, saying so: ``inplace_fallback``); a ``sleep`` without fractions (POSIX
    only asks for whole seconds) naps a second. TERM ends it at once (sh as PID 1 would ignore
    it). An annotation not set reads as empty: no attempt, never a new one. Sharing the pod's
    process namespace (it is not PID 1 there), it exits 0 once no process but its own and the
    sandbox's has run for ``release_after`` seconds: its trainer ended and no attempt came, and
    the pod ends as its trainer did, without the operator; and says whether they are quiet
    (a window timed by ``/proc/uptime`` in hundredths of a second, as the processes' clock
    ticks are at USER_HZ 100; ``busy``: a process's ticks in it that are not quiet)."""
    return rf"""trap 'exit 0' TERM
command -v sleep >/dev/null 2>&1 || {{
  echo "no sleep command in the trainer's image (PATH=$PATH)"; exit {c.WATCH_LACKS_EXIT_CODE}; }}
nap=0.2 ticks=5
sleep "$nap" 2>/dev/null || {{ nap=1 ticks=1; }}
hold=$(({release_after} * ticks)) idle=0
window=$(({window} * 100)) mark=0 active=0 up=
read -r up _ < /proc/uptime || :
[ -z "$up" ] || mark=${{up%.*}}${{up#*.}}
while :; do
  now=
  read -r now < {ATTEMPT_DIR}/attempt || :
  if [ -n "$now" ] && [ "$now" != "${c.ENV_ATTEMPT}" ]; then
    given=
    [ -e {ATTEMPT_DIR}/given ] && {{ read -r given < {ATTEMPT_DIR}/given || :; }}
    [ -n "$given" ] && [ "$given" != "$now" ] || exit {c.RESTART_EXIT_CODE}
  fi
  [ -s {ATTEMPT_DIR}/finished ] && exit 0
  if [ "$$" != 1 ]; then
    idle=$((idle + 1))
    for d in {PROC_DIR}/[0-9]*; do
      case "${{d##*/}}" in 1|"$$") ;; *) idle=0; break ;; esac
    done
    [ "$idle" -lt "$hold" ] || exit 0
    up=
    read -r up _ < /proc/uptime || :
    cs=${{up%.*}}${{up#*.}}
    if [ -n "$up" ] && [ $((cs - mark)) -ge "$window" ]; then
      busy=$(((cs - mark) * {c.QUIET_PERCENT} / 100))
      mark=$cs most=0
      for d in {PROC_DIR}/[0-9]*; do
        p=${{d##*/}}
        case "$p" in 1|"$$") continue ;; esac
        line=
        read -r line < "$d/stat" 2>/dev/null || continue
        # shellcheck disable=SC2086 # the fields after the command's name, split
        set -- ${{line##*) }}
        [ "$#" -ge 13 ] || continue
        used=$((${{12}} + ${{13}})) was=0
        eval "was=\${{cpu_$p:-0}}; cpu_$p=$used"
        [ $((used - was)) -le "$most" ] || most=$((used - was))
      done
      [ "$most" -lt "$busy" ] || active=1
      if [ "$active" = 1 ] && [ "$most" -lt "$busy" ]; then
        echo quiet > {ACTIVITY_DIR}/quiet || :
      else
        : > {ACTIVITY_DIR}/quiet || :
      fi
    fi
  fi
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


def _escaped(script: str) -> str:
    """``script`` as a container's command carries it: the kubelet reads ``$$`` as an escaped
    ``$`` (the syntax of ``$(VAR)`` references), so the shell's own ``$$`` is written twice."""
    return script.replace("$$", "$$$$")


def watch_container(
    trainer: Manifest, configmap: str, release_after: int = c.RELEASE_AFTER_SECONDS
) -> Manifest:
    """The container whose exit 86 restarts the pod in place."""
    return {
        "name": c.WATCH_CONTAINER,
        "image": trainer.get("image"),
        "imagePullPolicy": trainer.get("imagePullPolicy", "IfNotPresent"),
        "command": ["/bin/sh", "-c", _escaped(watch_script(release_after))],
        "env": [attempt_env(configmap)],
        "resources": RESOURCES,
        "securityContext": SECURITY,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": c.ATTEMPT_VOLUME, "mountPath": ATTEMPT_DIR, "readOnly": True},
            {"name": c.ACTIVITY_VOLUME, "mountPath": ACTIVITY_DIR},
        ],
        "readinessProbe": {
            "exec": {"command": ["/bin/sh", "-c", f"test ! -s {ACTIVITY_DIR}/quiet"]},
            "periodSeconds": c.QUIET_PROBE_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": 1,
        },
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


def make_in_place(
    pod: Manifest,
    trainer_at: int,
    attempt: int,
    configmap: str,
    release_after: int = c.RELEASE_AFTER_SECONDS,
) -> None:
    """Add to a worker pod (``trainer_at``: its trainer's index) what in-place restarts need;
    ``configmap``: the job's, which says the attempt. The pod's containers share one process
    namespace (unless the template says not to), so that the watch sees its trainer end."""
    meta, spec = pod["metadata"], pod["spec"]
    trainer = spec["containers"][trainer_at]
    annotations = meta.setdefault("annotations", {})
    annotations[c.ATTEMPT_ANNOTATION] = str(attempt)
    annotations.setdefault(c.DEFAULT_CONTAINER_ANNOTATION, trainer["name"])  # kubectl logs
    trainer["env"] = [
        attempt_env(configmap) if e.get("name") == c.ENV_ATTEMPT else e
        for e in trainer.get("env") or []
    ]
    spec["containers"].append(watch_container(trainer, configmap, release_after))
    spec.setdefault("shareProcessNamespace", True)
    items = [
        {"path": "attempt", "fieldRef": _annotation(c.ATTEMPT_ANNOTATION)},
        {"path": "finished", "fieldRef": _annotation(c.FINISHED_ANNOTATION)},
    ]
    given = {
        "name": configmap,
        "items": [{"key": c.ENV_ATTEMPT, "path": "given"}],
        "optional": True,
    }
    sources = [{"downwardAPI": {"items": items}}, {"configMap": given}]
    spec.setdefault("volumes", []).extend(
        [
            {"name": c.ATTEMPT_VOLUME, "projected": {"sources": sources}},
            {"name": c.ACTIVITY_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ]
    )


def told(attempt: int, when: str, restarts: int, container: str | None = None) -> dict[str, str]:
    """The annotations that tell a pod its next attempt, with ``when`` (RFC 3339), its trainer's
    restart count then (``restarts``) and the ID of its trainer's container then (``container``,
    if it has one): the restart is timed from the first and seen past the second, and never in a
    status still of that container (``model.workers``)."""
    said = {
        c.ATTEMPT_ANNOTATION: str(attempt),
        c.TOLD_AT_ANNOTATION: when,
        c.TOLD_RESTARTS_ANNOTATION: str(restarts),
    }
    return said | ({c.TOLD_CONTAINER_ANNOTATION: container} if container else {})
