"""What `kubectl ddp` says of a refused job (``refusals``): every error, each naming its field,
from the local checks (``jobspec.resolve``) and from a 422 of the API server. Pure. Through the
command and a real API server: tests/test_kubectl_ddp.py."""

from __future__ import annotations

import json

import pytest

from ddp_operator.commands import refusals
from ddp_operator.model.jobspec import SpecError, resolve

from jobs import ddpjob

# A 422 as the API server writes it for a DDPJob with three schema errors.
INVALID = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'DDPJob.ddp-operator.io "bad" is invalid: [spec.nodes: ..., ...]',
    "reason": "Invalid",
    "details": {
        "name": "bad",
        "group": "ddp-operator.io",
        "kind": "DDPJob",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0: spec.nodes in body should be greater than or equal "
                "to 1",
                "field": "spec.nodes",
            },
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 70000: spec.masterPort in body should be less than or "
                "equal to 65535",
                "field": "spec.masterPort",
            },
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "Sometimes": supported values: "Running", "All", '
                '"None"',
                "field": "spec.cleanPodPolicy",
            },
        ],
    },
    "code": 422,
}


def test_every_cause_of_a_422_is_told_naming_its_field() -> None:
    headline, errors = refusals.api_errors(json.dumps(INVALID).encode())
    assert headline == 'DDPJob "bad" is invalid'
    assert [e.split(":")[0] for e in errors] == [
        "spec.nodes",
        "spec.masterPort",
        "spec.cleanPodPolicy",
    ]
    said = refusals.lines(headline, errors)
    assert said[0] == 'DDPJob "bad" is invalid: 3 errors:'
    assert said[1:] == [f"  {e}" for e in errors]


def test_a_refusal_without_causes_is_its_message_in_one_line() -> None:
    gone = {"kind": "Status", "message": 'ddpjobs "nope" not found', "code": 404}
    assert refusals.api_errors(json.dumps(gone)) == ('ddpjobs "nope" not found', [])
    assert refusals.lines("404 Not Found: x", []) == ["404 Not Found: x"]
    assert refusals.api_errors(b"<html>proxy error</html>") == ("<html>proxy error</html>", [])
    one = refusals.lines('DDPJob "bad" is invalid', ["spec.nodes: Invalid value: 0"])
    assert one == ['DDPJob "bad" is invalid: spec.nodes: Invalid value: 0']


def test_the_local_checks_find_every_error_naming_each_field() -> None:
    body = ddpjob("bad", "ns", nodes=0, restartStrategy="Sometimes", cleanPodPolicy="Never")
    body["spec"]["accelerator"] = {"perNode": "two"}
    with pytest.raises(SpecError) as raised:
        resolve(body)
    fields = [e.split(" ")[0] for e in raised.value.errors]
    assert fields == [
        "spec.accelerator.resource",
        "spec.accelerator.perNode",
        "spec.nodes",
        "spec.restartStrategy",
        "spec.cleanPodPolicy",
    ], raised.value.errors
    assert str(raised.value) == "; ".join(raised.value.errors)  # on the job: all of them


def test_what_the_crd_accepts_the_local_checks_accept() -> None:
    spec = {
        "nodes": 2,
        "minNodes": 1,
        "maxNodes": 3,
        "procsPerNode": "auto",
        "backend": "mpi",
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 0,
        "cleanPodPolicy": "None",
        "successPolicy": "Worker0",
        "restartStrategy": "Recreate",
        "gangScheduling": {"scheduler": "Coscheduling", "timeoutSeconds": 30},
    }
    job = resolve(ddpjob("ok", "ns", **spec))
    assert (job.backend, job.clean_pod_policy, job.gang and job.gang.timeout_seconds) == (
        "mpi",
        "None",
        30,
    )
