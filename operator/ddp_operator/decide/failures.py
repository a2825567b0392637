"""What went wrong while acting for a job, classified: permanent (the job fails) or transient
(the job is blocked and the action retried with backoff). Pure: exceptions in, a Failure out.

Permanent: the API server refused the pod itself (``InvalidPodTemplate``: 422 or 400), a
PodSecurity violation (``PodSecurityViolation``), an admission webhook's denial
(``AdmissionDenied``), or a spec the operator cannot resolve (``InvalidSpec``). Retrying cannot
help: only a new spec can. Everything else is transient: quota (``QuotaExceeded``), throttling
(``Throttled``), a namespace being deleted (``NamespaceTerminating``), missing permissions of the
operator (``Forbidden``), a gang scheduler whose API the cluster does not serve
(``GangSchedulingUnavailable``: no pod is created until it does), conflicts with objects the job
does not own (``NameConflict``, ``WaitingForPreviousJob``), the API server unreachable or
failing (``APIUnavailable``), and any other error (``OperatorError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..model.jobspec import SpecError


@dataclass(frozen=True)
class Failure:
    """A classified failure of one step: its reason and the API's own message."""

    permanent: bool
    reason: str
    message: str


class NameConflict(Exception):
    """An object the job needs exists under its name and is not the job's."""

    def __init__(self, message: str, previous_job: bool = False):
        super().__init__(message)
        self.reason = "WaitingForPreviousJob" if previous_job else "NameConflict"


class GangUnavailable(Exception):
    """The cluster does not serve the API of the job's gang scheduler: no pod is created."""


class InPlaceRefused(Exception):
    """The API server refused (or dropped) what an in-place pod carries (``inplace_pod``): the
    job's pods are built to be recreated instead, and the job says why."""


# What the API server names when it refuses an in-place pod's additions: an unknown or disabled
# field or action (RestartAllContainersOnContainerExits or ContainerRestartRules off), or a
# policy against them.
IN_PLACE_WORDS = ("restartpolicyrules", "restartallcontainers", "restartpolicy:")


def refuses_in_place(exc: BaseException) -> bool:
    """Whether an API error refuses the additions of an in-place pod (not the user's template)."""
    status = getattr(exc, "status", None)
    lower = api_message(exc).lower()
    return status in (400, 403, 422) and any(w in lower for w in IN_PLACE_WORDS)


class StepFailed(Exception):
    """An error met in one named step of executing a plan (e.g. "creating pod a-worker-0")."""

    def __init__(self, step: str, cause: BaseException):
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.cause = cause


class PodsUnseen(StepFailed):
    """The operator cannot see the pods of the job's namespace (listing them fails, or watching
    them keeps failing): the job is Blocked, and nothing is done for it until they are seen."""


def api_message(exc: BaseException) -> str:
    """The API server's own message of an ApiException (field paths included), else the text."""
    body = getattr(exc, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        return str(message or body)[:1000]
    text = str(exc).strip()
    return text.splitlines()[0][:1000] if text else type(exc).__name__


def classify(exc: BaseException) -> Failure:
    """Classify an error met while acting for a job (see the module docstring)."""
    step = ""
    if isinstance(exc, StepFailed):
        step, exc = f"{exc.step}: ", exc.cause
    if isinstance(exc, SpecError):
        return Failure(True, "InvalidSpec", step + str(exc))
    if isinstance(exc, NameConflict):
        return Failure(False, exc.reason, step + str(exc))
    if isinstance(exc, GangUnavailable):
        return Failure(False, "GangSchedulingUnavailable", step + str(exc))
    status = getattr(exc, "status", None)
    message = step + api_message(exc)
    if not isinstance(status, int) or status == 0:
        unavailable = "connect" in message.lower() or "timed out" in message.lower()
        return Failure(False, "APIUnavailable" if unavailable else "OperatorError", message)
    lower = message.lower()
    if "violates podsecurity" in lower:
        return Failure(True, "PodSecurityViolation", message)
    if "admission webhook" in lower and "denied" in lower:
        return Failure(True, "AdmissionDenied", message)
    if status in (400, 422):
        return Failure(True, "InvalidPodTemplate" if "pod" in step else "Invalid", message)
    if status == 403 and "exceeded quota" in lower:
        return Failure(False, "QuotaExceeded", message)
    if status == 403 and "being terminated" in lower:
        return Failure(False, "NamespaceTerminating", message)
    if status in (401, 403):
        return Failure(False, "Forbidden", message)
    if status == 429:
        return Failure(False, "Throttled", message)
    if status >= 500:
        return Failure(False, "APIUnavailable", f"{message} (HTTP {status})")
    return Failure(False, "APIError", f"{message} (HTTP {status})")
