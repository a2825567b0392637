"""The DDPJob a ``train`` call submits (``job_manifest``): the trainer container running the
entry under torchrun, with the pod's placement, resources, volumes and env as keywords, so that
the common cases need no hand-written pod template."""

from __future__ import annotations

import copy
import inspect
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..manifests.builders import trainer_index
from ..model import constants as c

Env = Mapping[str, str | int | float]
"""Environment variables by name; numbers are written as the strings the API needs."""
Resources = Mapping[str, Mapping[str, str | int]]
"""A container's ``resources``: ``{"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}``."""

RESOURCE_KINDS = ("requests", "limits")


def job_manifest(
    entry: str | Callable[[], Any],
    *,
    image: str,
    nodes: int = 2,
    procs_per_node: int = 1,
    name: str | None = None,
    args: Sequence[str] = (),
    env: Env | None = None,
    backend: str | None = None,
    resources: Resources | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    volumes: Sequence[Mapping[str, Any]] = (),
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    pod: Mapping[str, Any] | None = None,
    container: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A DDPJob that runs ``entry`` under torchrun on every worker: a script path in the image,
    or a function (its source is shipped in the job; it must import what it uses).

    The trainer container (of ``template=``, a pod template, if given: the container named
    ``trainer``, else the first, renamed so that ``logs`` finds it) gets ``image``, the
    torchrun command, ``env`` (by name, over its own), ``resources`` (by quantity, over its own)
    and ``volume_mounts``; the pod spec gets ``node_selector`` (over its own), ``tolerations``
    and ``volumes``. ``pod`` and ``container`` are laid last, key by key, over the pod spec and
    the trainer container, for any other field (``imagePullPolicy``, ``priorityClassName``).
    Other keywords are DDPJob spec fields (``backoffLimit=2``). ValueError for a resources
    kind other than requests and limits, or a mount of no volume of the pod.
    """
    if callable(entry):
        source = inspect.getsource(entry) + f"\n{entry.__name__}()\n"
        command = ["torchrun", "--no-python", "python", "-c", source, *args]
        default = entry.__name__.replace("_", "-").lower()
    else:
        command = ["torchrun", entry, *args]
        default = entry.rsplit("/", 1)[-1].removesuffix(".py").replace("_", "-").lower()
    template = copy.deepcopy(dict(spec.pop("template", None) or {}))
    pod_spec = template["spec"] = template.get("spec") or {}
    pod_spec["containers"] = pod_spec.get("containers") or [{}]
    trainer = pod_spec["containers"][trainer_index(pod_spec)]  # named so, else the first
    trainer |= {"name": c.TRAINER_CONTAINER, "image": image, "args": command}
    _lay(trainer, pod_spec, env, resources, node_selector, tolerations, volumes, volume_mounts)
    pod_spec |= pod or {}
    trainer |= container or {}
    _check_mounts(volume_mounts, pod_spec)
    body: dict[str, Any] = {"nodes": nodes, "procsPerNode": procs_per_node, **spec}
    body["template"] = template
    if backend:
        body["backend"] = backend
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name or f"{default}-{uuid.uuid4().hex[:5]}"},
        "spec": body,
    }


def _lay(
    trainer: dict[str, Any],
    pod_spec: dict[str, Any],
    env: Env | None,
    resources: Resources | None,
    node_selector: Mapping[str, str] | None,
    tolerations: Sequence[Mapping[str, Any]],
    volumes: Sequence[Mapping[str, Any]],
    volume_mounts: Sequence[Mapping[str, Any]],
) -> None:
    """Lay the keyword options over the trainer container and its pod spec (both changed)."""
    if env:
        kept = [x for x in trainer.get("env") or [] if x.get("name") not in env]
        trainer["env"] = kept + [{"name": k, "value": str(v)} for k, v in env.items()]
    if resources:
        wrong = sorted(set(resources) - set(RESOURCE_KINDS))
        if wrong:
            raise ValueError(f"resources: {', '.join(wrong)}: only requests and limits")
        have = trainer.setdefault("resources", {})
        for kind, amounts in resources.items():
            have[kind] = {**(have.get(kind) or {}), **amounts}
    if node_selector:
        pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **node_selector}
    for key, more, where in (
        ("tolerations", tolerations, pod_spec),
        ("volumes", volumes, pod_spec),
        ("volumeMounts", volume_mounts, trainer),
    ):
        if more:
            where[key] = [*(where.get(key) or []), *(dict(x) for x in more)]


def _check_mounts(volume_mounts: Sequence[Mapping[str, Any]], pod_spec: Mapping[str, Any]) -> None:
    """A mount must name a volume of the pod: the API server would refuse every worker."""
    have = {v.get("name") for v in pod_spec.get("volumes") or []}
    missing = [m.get("name") for m in volume_mounts if m.get("name") not in have]
    if missing:
        raise ValueError(f"volume_mounts: no volume named {', '.join(map(str, missing))}")
