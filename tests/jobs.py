"""DDPJob manifests for tests, written only with the API's own field names."""

from __future__ import annotations

from typing import Any


def ddpjob(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """A DDPJob with a one-container template; keyword arguments are spec fields."""
    template = spec.pop("template", None) or {
        "spec": {
            "containers": [
                {"name": "trainer", "image": "python:3.11-slim", "command": ["python", "train.py"]}
            ]
        }
    }
    return {
        "apiVersion": "ddp-operator.io/v1alpha1",
        "kind": "DDPJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodes": 2, **spec, "template": template},
    }


def env_of(pod: dict[str, Any], job: Any) -> dict[str, str]:
    """A worker pod's trainer env as the kubelet resolves it, the job's ConfigMaps being as the
    operator writes them at the pod's attempt (``job``: its JobSpec)."""
    from ddp_operator.manifests import builders, worker_env
    from ddp_operator.model import constants as c

    trainer = pod["spec"]["containers"][builders.trainer_index(pod["spec"])]
    attempt = int(pod["metadata"]["labels"][c.LABEL_ATTEMPT])
    configmaps = worker_env.configmaps(job, attempt, builders.worker_hosts(job))
    env, missing = worker_env.resolve(trainer, configmaps)
    assert not missing, missing
    return env
