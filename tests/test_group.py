"""The group a status asks for (``decide/group.py``): its attempt, its workers and the pods that
are not of it, for both restart strategies and elastic replacements. Pure."""

from __future__ import annotations

from ddp_operator.decide import group
from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import observe

from jobs import ddpjob

JOB = resolve(ddpjob("j", "ns", nodes=2, restartStrategy="InPlace"))


def pod(index: int, created: int, told: int | None = None, uid: str = ""):
    """A Running worker pod created in attempt ``created`` (in place, told ``told``)."""
    manifest = builders.build_worker_pod(JOB, index, created, in_place=told is not None)
    manifest["metadata"]["uid"] = uid or f"uid-{index}-{created}"
    if told is not None:
        manifest["metadata"]["annotations"]["ddp-operator.io/attempt"] = str(told)
    statuses = [
        {"name": name, "restartCount": 0, "state": {"running": {}}}
        for name in ("trainer", "ddp-attempt-watch")
    ]
    manifest["status"] = {"phase": "Running", "containerStatuses": statuses}
    found = observe(manifest)
    assert found is not None
    return found


def names(pods) -> list[str]:
    return sorted(p.name for p in pods)


def test_in_place_pods_told_earlier_attempts_are_the_group_until_it_is_recreated() -> None:
    pods = [pod(0, 0, told=2), pod(1, 0, told=1)]
    kept = group.of(JOB, {"restarts": 2}, pods, in_place=True)
    assert kept.attempt == 2 and sorted(kept.current) == [0, 1] and not kept.stale
    # Recreated in attempt 3: those pods are stale, though they could restart in place.
    gone = group.of(JOB, {"restarts": 3, "createdInAttempt": 3}, pods, in_place=True)
    assert gone.attempt == 3 and not gone.current and names(gone.stale) == names(pods)
    new = [pod(0, 3, told=3), pod(1, 3, told=3)]
    recreated = group.of(JOB, {"restarts": 3, "createdInAttempt": 3}, new, in_place=True)
    assert sorted(recreated.current) == [0, 1] and not recreated.stale


def test_the_attempt_is_the_status_s_or_a_later_one_its_pods_carry() -> None:
    assert group.attempt({"restarts": 1}, [pod(0, 0, told=3)]) == 3
    assert group.attempt({"restarts": 4}, [pod(0, 2)]) == 4
    assert group.attempt({}, []) == 0


def test_recreated_pods_of_an_earlier_attempt_are_stale() -> None:
    pods = [pod(0, 1), pod(1, 0)]
    found = group.of(JOB, {"restarts": 1, "createdInAttempt": 1}, pods, in_place=False)
    assert sorted(found.current) == [0] and names(found.stale) == ["j-worker-1"]


def test_a_worker_replaced_alone_leaves_the_group_until_its_successor_is_seen() -> None:
    elastic = resolve(ddpjob("j", "ns", nodes=2, minNodes=1, maxNodes=3))
    old = pod(1, 0, uid="old")
    status = {"restarts": 0, "replacing": [{"index": 1, "uid": "old"}]}
    found = group.of(elastic, status, [pod(0, 0), old], in_place=False)
    assert sorted(found.current) == [0] and found.stale == (old,)
    assert found.replacing == {1: "old"}
    successor = pod(1, 0, uid="new")
    after = group.of(elastic, status, [pod(0, 0), successor], in_place=False)
    assert sorted(after.current) == [0, 1] and not after.replacing
