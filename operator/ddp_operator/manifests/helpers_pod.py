"""What the operator brings to every worker, whatever its image: its helpers (``helpers/`` of
this repository, in the operator's image at HELPERS_SOURCE): ``ddp_operator.progress`` and
``checkpoint`` with no install, the stacks watch started at each Python process's start (the
helpers' ``sitecustomize``, which then runs the image's own), Lightning's callback through its
entry point (a ``.dist-info``); and, for in-place restarts, a watch that needs no shell in the
trainer's image. Pure: a pod manifest in, the same manifest with these additions out.

Delivered (``Delivery.mode``) by:

* ``InitContainer`` (the default): a container of the operator's image copies the helpers into
  an emptyDir before the trainer starts; any cluster, any container runtime.
* ``ImageVolume``: the operator's image mounted read-only (Kubernetes image volumes, KEP-4639:
  on by default from 1.35, with containerd 2.1+ or CRI-O 1.31+), no copy and no extra container.
  A node whose runtime cannot mount it leaves the pod ``ContainerCreating``: an opt-in.

The trainer container mounts them at HELPERS_DIR, first on its ``PYTHONPATH`` (the template's
entries after it: its value, its ``valueFrom`` through TEMPLATE_PYTHONPATH, one from ``envFrom``
through ``$(PYTHONPATH)``). ``ddp_operator`` there is a namespace package: a copy installed in
the image (``pip install ddp-operator``, a regular package) is imported instead, wherever it
stands on the path. The image's own ``PYTHONPATH`` (its Dockerfile's ``ENV``) gives way to the
pod's, as any pod's environment does: a template that needs it names it (``spec.helpers``
turns the delivery off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import constants as c
from . import inplace_pod
from .builders import trainer_index

Manifest = dict[str, Any]

HELPERS_SOURCE = "/opt/ddp-operator/helpers"  # in the operator's image (its Dockerfile)
# What that folder holds: the repository's helpers/, and these modules of ddp_operator (Python 3.9+,
# the standard library only) in ddp_operator/ beside them.
MODULES = ("progress.py", "progress_stacks.py", "lightning_progress.py")
HELPERS_DIR = "/ddp-operator/helpers"  # in the trainer container
COPY_DIR = "/ddp-helpers"  # the init container's view of the emptyDir
TEMPLATE_PYTHONPATH = "DDP_TEMPLATE_PYTHONPATH"  # a template's PYTHONPATH given by valueFrom
MODES = ("InitContainer", "ImageVolume")

# An init container's requests equal to its limits keep a Guaranteed pod Guaranteed.
RESOURCES = {
    "requests": {"cpu": "50m", "memory": "32Mi"},
    "limits": {"cpu": "50m", "memory": "32Mi"},
}
SECURITY = {**inplace_pod.SECURITY, "readOnlyRootFilesystem": True}  # restricted, as the watch


@dataclass(frozen=True)
class Delivery:
    """How the operator delivers its helpers: from ``image`` (its own), by ``mode``."""

    image: str
    mode: str = "InitContainer"
    pull_policy: str = "IfNotPresent"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(
                f"helpers delivery must be one of {', '.join(MODES)}, not {self.mode!r}"
            )


def python_path(template: str | None) -> str:
    """The trainer's ``PYTHONPATH``: the helpers first, then the template's own entries."""
    return f"{HELPERS_DIR}:{template}" if template else HELPERS_DIR


def _put_first(trainer: Manifest) -> None:
    """The helpers first on the trainer's ``PYTHONPATH``, the template's entries kept after
    them (the kubelet expands ``$(NAME)`` from the variables before it, ``envFrom``'s
    included)."""
    env = trainer.setdefault("env", [])
    at = next((i for i, e in enumerate(env) if e.get("name") == "PYTHONPATH"), None)
    if at is None:
        # The template's own envFrom: all but the last, the job's (``worker_env.give``).
        earlier = "$(PYTHONPATH)" if (trainer.get("envFrom") or [])[:-1] else None
        env.append({"name": "PYTHONPATH", "value": python_path(earlier)})
    elif "valueFrom" in env[at]:
        env[at] = {**env[at], "name": TEMPLATE_PYTHONPATH}
        value = python_path(f"$({TEMPLATE_PYTHONPATH})")
        env.insert(at + 1, {"name": "PYTHONPATH", "value": value})
    else:
        env[at] = {**env[at], "value": python_path(env[at].get("value"))}


def _copy_container(delivery: Delivery) -> Manifest:
    """The init container that copies the helpers into the pod's emptyDir (``cp`` of the
    operator's image, Debian's coreutils; files world-readable there)."""
    return {
        "name": c.HELPERS_CONTAINER,
        "image": delivery.image,
        "imagePullPolicy": delivery.pull_policy,
        "command": ["cp", "-R", f"{HELPERS_SOURCE}/.", f"{COPY_DIR}/"],
        "resources": RESOURCES,
        "securityContext": SECURITY,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": c.HELPERS_VOLUME, "mountPath": COPY_DIR}],
    }


def _volume(delivery: Delivery) -> Manifest:
    if delivery.mode == "ImageVolume":
        image = {"reference": delivery.image, "pullPolicy": delivery.pull_policy}
        return {"name": c.HELPERS_VOLUME, "image": image}
    return {"name": c.HELPERS_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}}


def _mount(delivery: Delivery) -> Manifest:
    mount = {"name": c.HELPERS_VOLUME, "mountPath": HELPERS_DIR, "readOnly": True}
    if delivery.mode == "ImageVolume":
        mount["subPath"] = HELPERS_SOURCE.lstrip("/")
    return mount


def add_helpers(pod: Manifest, delivery: Delivery) -> Manifest:
    """Give the pod's trainer the helpers (and an in-place pod's watch the operator's image,
    which has the shell and ``sleep`` it runs); the pod is changed in place and returned."""
    spec = pod["spec"]
    trainer = spec["containers"][trainer_index(spec)]
    _put_first(trainer)
    trainer.setdefault("volumeMounts", []).append(_mount(delivery))
    spec.setdefault("volumes", []).append(_volume(delivery))
    if delivery.mode == "InitContainer":
        spec.setdefault("initContainers", []).append(_copy_container(delivery))
    for container in spec["containers"]:
        if container.get("name") == c.WATCH_CONTAINER:
            container["image"] = delivery.image
            container["imagePullPolicy"] = delivery.pull_policy
    return pod


def delivered(pod: Manifest) -> bool:
    """Whether a pod (as built, or as the API server returned it) has the helpers."""
    volumes = (pod.get("spec") or {}).get("volumes") or ()
    return any(v.get("name") == c.HELPERS_VOLUME for v in volumes)
