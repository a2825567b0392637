"""Whether a cluster is set up for DDPJobs, as the tools (``kubectl ddp``, the SDK) tell their
users in one line: is the CRD served at all (an API server's 404 for the ``ddpjobs`` resource
itself, not for one named job), and has any operator spoken to a job (written its status) within
a window after its creation. Pure: answers and jobs in, verdicts out; ``now`` is passed in."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..model import constants as c
from ..model.jobspec import managed_here
from .conditions import parse_time

CRD_NAME = f"{c.PLURAL}.{c.GROUP}"
NO_CRD = (
    f"the {c.KIND} CRD ({CRD_NAME}) is not installed on this cluster: "
    "helm install ddp-operator charts/ddp-operator ... or kubectl apply -f crds/"
)

# How long after its creation a job without a word from any operator is said to be unheard,
# and the variable that changes it (seconds; the tests use a short one).
WINDOW_S = 30.0
WINDOW_ENV = "DDP_PICKUP_WINDOW"


def crd_missing(status: int | None, body: Any) -> bool:
    """Whether an API server's answer (HTTP ``status``, ``body``) to a request for DDPJobs says
    the resource is not served: a 404 whose body is not a Status naming an object. The API
    server answers an unserved path with the plain text ``404 page not found``; a job that does
    not exist is a NotFound Status with ``details.name``, and keeps its own message."""
    if status != 404:
        return False
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        parsed = json.loads(text)
    except ValueError:
        return True
    if not isinstance(parsed, dict) or parsed.get("kind") != "Status":
        return True
    return not (parsed.get("details") or {}).get("name")


def window(env: Mapping[str, str]) -> float:
    """The window of ``unheard``: ``DDP_PICKUP_WINDOW`` in ``env`` (seconds, >= 0) if it is
    one, else 30 s."""
    try:
        seconds = float(env.get(WINDOW_ENV, WINDOW_S))
    except ValueError:
        return WINDOW_S
    return seconds if seconds >= 0 else WINDOW_S


def heard(job: Mapping[str, Any]) -> bool:
    """Whether an operator has written the job's status (a phase or a condition): every pass
    of its loop writes both, the first one right after it sees the job."""
    status = job.get("status") or {}
    return bool(status.get("phase") or status.get("conditions"))


def awaits_operator(job: Mapping[str, Any]) -> bool:
    """Whether the job waits for this project's operator to speak first: it manages the job
    and has not written its status yet."""
    return managed_here(job) and not heard(job)


def unheard(job: Mapping[str, Any], now: datetime, seconds: float = WINDOW_S) -> str | None:
    """The line saying that no operator has picked ``job`` up, if none has written its status
    and it was created (``metadata.creationTimestamp``) more than ``seconds`` before ``now``;
    else None. None too for a job another controller manages (``spec.managedBy``: MultiKueue
    writes its status once it runs elsewhere)."""
    if not awaits_operator(job):
        return None
    meta = job.get("metadata") or {}
    created = parse_time(meta.get("creationTimestamp"))
    if created is None or (now - created).total_seconds() <= seconds:
        return None
    name, ns = meta.get("name", ""), meta.get("namespace", "")
    return (
        f"no operator has picked up ddpjob/{name} in namespace {ns} after {seconds:g} s: "
        f"is one running and watching {ns}?"
    )
