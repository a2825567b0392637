"""What a worker pod gets to report the training's progress (``ddp_operator.progress``): the
endpoint's URL for its job and a token bound to the pod, for the endpoint's audience only.

The token is the kubelet's projected service account token: no Secret, no RBAC for the pod (the
API server accepts it for nothing else), refreshed by the kubelet, void once the pod is gone.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..model import constants as c
from ..progress import TOKEN_ENV, URL_ENV  # the names the scripts' reporter reads
from .builders import trainer_index

VOLUME = "ddp-progress-token"
DIRECTORY = "/var/run/secrets/ddp-operator.io/progress"
TOKEN_FILE = f"{DIRECTORY}/token"
TOKEN_SECONDS = 3600  # the kubelet renews it at 80% of this
# Kubeflow Trainer's names (KEP-2779), which Hugging Face's KubeflowCallback reads: the status
# URL (http here: the callback takes any), the token's file. No CA: the endpoint is not TLS.
KUBEFLOW_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
KUBEFLOW_TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"


def job_url(base: str, namespace: str, name: str) -> str:
    """Where the job's pods report: the endpoint's base URL and the job's path."""
    return f"{base.rstrip('/')}/v1/namespaces/{quote(namespace)}/ddpjobs/{quote(name)}/progress"


def kubeflow_url(base: str, namespace: str, name: str) -> str:
    """Where a script speaking Kubeflow Trainer's protocol posts the job's status."""
    path = c.KUBEFLOW_STATUS_ROUTE.format(namespace=quote(namespace), name=quote(name))
    return f"{base.rstrip('/')}{path}"


def add_reporting(pod: dict[str, Any], base: str) -> dict[str, Any]:
    """Give the pod's trainer container the job's report URL and a token (a volume) to report
    with, under our names and Kubeflow Trainer's (a template's own Kubeflow entries are kept);
    the pod is changed in place and returned."""
    meta, spec = pod["metadata"], pod["spec"]
    trainer = spec["containers"][trainer_index(spec)]
    job = meta["labels"][c.LABEL_JOB]
    env = trainer.setdefault("env", [])
    named = {e.get("name") for e in env}
    kubeflow = [
        (KUBEFLOW_URL_ENV, kubeflow_url(base, meta["namespace"], job)),
        (KUBEFLOW_TOKEN_ENV, TOKEN_FILE),
    ]
    env.extend(
        [
            {"name": URL_ENV, "value": job_url(base, meta["namespace"], job)},
            {"name": TOKEN_ENV, "value": TOKEN_FILE},
            *({"name": k, "value": v} for k, v in kubeflow if k not in named),
        ]
    )
    trainer.setdefault("volumeMounts", []).append(
        {"name": VOLUME, "mountPath": DIRECTORY, "readOnly": True}
    )
    token = {"audience": c.PROGRESS_AUDIENCE, "expirationSeconds": TOKEN_SECONDS, "path": "token"}
    spec.setdefault("volumes", []).append(
        {"name": VOLUME, "projected": {"sources": [{"serviceAccountToken": token}]}}
    )
    return pod
