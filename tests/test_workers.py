"""Unit tests of the pod summary: what the operator keeps of a worker pod's status."""

from __future__ import annotations

from typing import Any

from ddp_operator.decide.failure_facts import of_pod
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.pod_status import Waiting
from ddp_operator.model.workers import observe

from jobs import ddpjob


def pod(status: dict[str, Any]) -> dict[str, Any]:
    body = ddpjob("j", "ns", nodes=1)
    body["metadata"]["uid"] = "u"
    worker = builders.build_worker_pod(resolve(body), 0, attempt=0)
    worker["status"] = status
    return worker


def waiting(name: str, reason: str, message: str | None = None) -> dict[str, Any]:
    state = {"reason": reason, **({"message": message} if message is not None else {})}
    return {"name": name, "state": {"waiting": state}}


def test_a_container_that_cannot_start_is_kept_with_the_kubelets_words() -> None:
    msg = 'Back-off pulling image "pytorch/pytroch:2.3"'
    w = observe(
        pod(
            {"phase": "Pending", "containerStatuses": [waiting("trainer", "ImagePullBackOff", msg)]}
        )
    )
    assert w is not None and w.not_starting == Waiting("trainer", "ImagePullBackOff", msg)


def test_containers_on_their_normal_way_to_start_are_not() -> None:
    for reason in ("ContainerCreating", "PodInitializing"):
        w = observe(pod({"phase": "Pending", "containerStatuses": [waiting("trainer", reason)]}))
        assert w is not None and w.not_starting is None, reason
    running = {"name": "trainer", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
    assert observe(pod({"phase": "Running", "containerStatuses": [running]})).not_starting is None
    assert observe(pod({"phase": "Pending"})).not_starting is None


def test_an_init_container_comes_first_and_a_missing_message_is_empty() -> None:
    status = {
        "phase": "Pending",
        "initContainerStatuses": [waiting("fetch", "ErrImageNeverPull")],
        "containerStatuses": [waiting("trainer", "PodInitializing")],
    }
    assert observe(pod(status)).not_starting == Waiting("fetch", "ErrImageNeverPull", "")
    status["initContainerStatuses"] = [
        {"name": "fetch", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    ]
    status["containerStatuses"] = [
        {"name": "sidecar", "state": {"running": {}}},
        waiting("trainer", "CreateContainerConfigError", 'configmap "cfg" not found'),
    ]
    found = observe(pod(status)).not_starting
    assert found == Waiting("trainer", "CreateContainerConfigError", 'configmap "cfg" not found')


def terminated(code: int, reason: str) -> dict[str, Any]:
    return {"name": "trainer", "state": {"terminated": {"exitCode": code, "reason": reason}}}


def test_an_exit_code_of_a_signal_names_the_signal() -> None:
    for code, reason, words in (
        (137, "Error", "exited with code 137 (Error, killed by SIGKILL)"),
        (143, "Error", "exited with code 143 (Error, killed by SIGTERM)"),
        (3, "Error", "exited with code 3 (Error)"),
        (200, "Error", "exited with code 200 (Error)"),  # 128 + 72: no such signal
    ):
        w = observe(pod({"phase": "Failed", "containerStatuses": [terminated(code, reason)]}))
        said = of_pod(w).describe()
        assert w is not None and words in said, (code, said)


def test_the_attempt_a_pod_was_created_in_is_read_from_either_label() -> None:
    """``created-in-attempt``, or ``attempt`` on pods of builds up to 0.2.0."""
    body = ddpjob("j", "ns", nodes=1)
    worker = builders.build_worker_pod(resolve(body), 0, attempt=3)
    new = observe(worker)
    assert new is not None and new.attempt == 3
    labels = worker["metadata"]["labels"]
    labels["ddp-operator.io/attempt"] = labels.pop("ddp-operator.io/created-in-attempt")
    old = observe(worker)
    assert old is not None and old.attempt == 3
    del labels["ddp-operator.io/attempt"]
    assert (observe(worker) or new).attempt == 0
