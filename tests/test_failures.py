"""Classification of what the operator meets while acting for a job (permanent or transient)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError

from ddp_operator.decide.failures import NameConflict, StepFailed, classify


def api_error(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


@pytest.mark.parametrize(
    ("status", "message", "permanent", "reason"),
    [
        (
            422,
            'Pod "a-worker-0" is invalid: spec.containers[0].image: Required value',
            True,
            "InvalidPodTemplate",
        ),
        (400, "bad request", True, "InvalidPodTemplate"),
        (
            403,
            'pods "a-worker-0" is forbidden: violates PodSecurity "restricted:latest": ...',
            True,
            "PodSecurityViolation",
        ),
        (400, 'admission webhook "policy.example" denied the request: no', True, "AdmissionDenied"),
        (
            403,
            'pods "a-worker-0" is forbidden: exceeded quota: q, requested: pods=1',
            False,
            "QuotaExceeded",
        ),
        (
            403,
            "unable to create new content in namespace x because it is being terminated",
            False,
            "NamespaceTerminating",
        ),
        (
            403,
            'pods is forbidden: User "system:serviceaccount:x:y" cannot create resource',
            False,
            "Forbidden",
        ),
        (429, "too many requests", False, "Throttled"),
        (503, "etcdserver: leader changed", False, "APIUnavailable"),
        (404, "namespaces x not found", False, "APIError"),
    ],
)
def test_api_errors(status: int, message: str, permanent: bool, reason: str) -> None:
    failure = classify(StepFailed("creating pod a-worker-0", api_error(status, message)))
    assert (failure.permanent, failure.reason) == (permanent, reason)
    # The API's own message, field path included, prefixed by the step.
    assert failure.message.startswith(f"creating pod a-worker-0: {message}")


def test_unreachable_api_server_is_transient() -> None:
    cause = NewConnectionError(None, "Failed to establish a new connection: Connection refused")
    exc = MaxRetryError(None, "/api/v1/namespaces/x/pods", cause)
    failure = classify(StepFailed("creating the Service", exc))
    assert (failure.permanent, failure.reason) == (False, "APIUnavailable")
    assert "Connection refused" in failure.message


def test_conflicts_and_unknown_errors_are_transient() -> None:
    assert classify(NameConflict("Service a is not ours")).reason == "NameConflict"
    previous = classify(NameConflict("old pods", previous_job=True))
    assert (previous.permanent, previous.reason) == (False, "WaitingForPreviousJob")
    other = classify(RuntimeError("boom"))
    assert (other.permanent, other.reason, other.message) == (False, "OperatorError", "boom")
