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
