"""What a running job owns, kept as declared (``decide/owned``): which objects are missing or
changed by hand, the patch that puts one back, and what the job says of it. Pure."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from ddp_operator.decide import owned
from ddp_operator.decide.conditions import Conditions, condition
from ddp_operator.manifests import worker_env
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from jobs import ddpjob

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
AT = "2026-11-25T12:00:00Z"


def job(**spec):
    body = ddpjob("train", "team", **spec)
    body["metadata"]["uid"] = "u-1"
    return resolve(body)


def observed(want: list[owned.Declared]) -> dict:
    """The objects as the API server shows them once created: defaults added beside."""
    seen = {}
    for d in want:
        obj = copy.deepcopy(dict(d.manifest))
        obj["metadata"]["uid"] = f"uid-{d.name}"
        if d.kind == "Service":
            obj["spec"]["ports"][0]["protocol"] = "TCP"
            obj["spec"]["sessionAffinity"] = "None"
        seen[d.key] = obj
    return seen


def test_kept_while_the_job_runs_only() -> None:
    live = [WorkerPod("train-worker-0", 0, 0)]
    assert owned.applies("Running", False, live)
    assert not owned.applies("Succeeded", False, live)
    assert not owned.applies("Running", True, live)
    assert not owned.applies("Running", False, [])
    assert not owned.applies("Restarting", False, [WorkerPod("w", 0, 0, deleting=True)])


def test_the_declared_objects_and_nothing_amiss_once_created() -> None:
    want = owned.declared(job(), 3, True, {})
    assert [d.key for d in want] == [
        ("Service", "train"),
        ("ConfigMap", "train-ddp-env"),
        ("NetworkPolicy", "train-ddp-isolation"),
    ]
    assert want[1].manifest["data"][c.ENV_ATTEMPT] == "3"  # created again: the recorded attempt
    assert c.ENV_ATTEMPT not in want[1].fields["data"]  # the loop's to move, not put back
    review = owned.review(want, observed(want), "u-1")
    assert review.missing == [] and review.changed == []
    assert [d.kind for d in owned.declared(job(), 0, False, {})] == ["Service", "ConfigMap"]


def test_missing_and_changed_objects_and_the_patch_that_puts_one_back() -> None:
    want = owned.declared(job(), 0, True, {})
    seen = observed(want)
    del seen[("Service", "train")]
    policy = seen[("NetworkPolicy", "train-ddp-isolation")]
    policy["spec"]["ingress"].append({})  # an allow-all rule added by hand
    env = seen[("ConfigMap", "train-ddp-env")]
    env["data"][f"{c.ENV_HOSTS}.2"] = "elsewhere"
    env["data"][c.ENV_ATTEMPT] = "7"  # not compared
    review = owned.review(want, seen, "u-1")
    assert [d.key for d in review.missing] == [("Service", "train")]
    changed = {d.kind: patch for d, patch in review.changed}
    assert set(changed) == {"NetworkPolicy", "ConfigMap"}
    assert changed["NetworkPolicy"]["spec"]["ingress"] == want[2].manifest["spec"]["ingress"]
    assert c.ENV_ATTEMPT not in changed["ConfigMap"]["data"]


def test_the_common_values_are_declared_while_a_pod_reads_them() -> None:
    j = job()
    common = worker_env.name(j)
    made_before = [WorkerPod("train-worker-0", 0, 0)]  # by an operator without them
    assert all(d.name != common for d in owned.declared(j, 0, False, {}, made_before))
    reader = [WorkerPod("train-worker-0", 0, 0, env_from=(common,))]
    want = owned.declared(j, 0, False, {}, reader)
    assert [d.key for d in want][-1] == ("ConfigMap", common)
    assert want[-1].manifest["immutable"] is True
    seen = observed(want)
    assert owned.review(want, seen, "u-1").changed == []
    del seen[("ConfigMap", common)]
    assert [d.name for d in owned.review(want, seen, "u-1").missing] == [common]


def test_a_selector_is_exact_and_put_back_whole() -> None:
    want = owned.declared(job(), 0, False, {})
    seen = observed(want)
    service = seen[("Service", "train")]
    service["spec"]["selector"]["extra"] = "narrower"  # no endpoint: no worker resolves
    (_d, patch), = owned.review(want, seen, "u-1").changed  # fmt: skip
    assert patch["spec"]["selector"] == {c.LABEL_JOB: "train", "extra": None}
    assert owned.covers({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}})  # a default beside: fine
    assert not owned.covers({"l": [1]}, {"l": [1, 2]})


def test_what_another_controls_is_left_alone_and_a_deleting_one_awaited() -> None:
    want = owned.declared(job(), 0, False, {})
    seen = observed(want)
    seen[("Service", "train")]["metadata"]["ownerReferences"][0]["uid"] = "another"
    seen[("Service", "train")]["spec"]["ports"] = []
    seen[("ConfigMap", "train-ddp-env")]["metadata"]["deletionTimestamp"] = AT
    review = owned.review(want, seen, "u-1")
    assert review.missing == [] and review.changed == []


def test_the_job_says_what_was_restored_and_when_isolation_was_lost() -> None:
    want = {d.kind: d for d in owned.declared(job(), 0, True, {})}
    conds = Conditions([], NOW, 1)
    outcome = owned.Outcome([want["Service"], want["NetworkPolicy"]], [], [])
    owned.tell(conds, outcome, True, AT)
    restored = condition(conds.items, owned.COND_OWNED)
    assert restored["status"] == "True" and restored["reason"] == "ObjectsRestored"
    assert "Service train, NetworkPolicy train-ddp-isolation missing (seen" in restored["message"]
    isolated = condition(conds.items, owned.COND_ISOLATED)
    assert isolated["status"] == "True" and isolated["reason"] == "NetworkPolicyRestored"
    assert {e.reason for e in conds.events} == {"ObjectsRestored", "NetworkPolicyRestored"}
    assert all(e.type == "Warning" for e in conds.events)
    # Creating it again fails: isolation is lost until it is back.
    conds = Conditions(conds.items, NOW, 1)
    owned.tell(conds, owned.Outcome([], [], [(want["NetworkPolicy"], "forbidden")]), True, AT)
    assert condition(conds.items, owned.COND_OWNED)["reason"] == "RestoreFailed"
    lost = condition(conds.items, owned.COND_ISOLATED)
    assert lost["status"] == "False" and lost["reason"] == "NetworkPolicyMissing"
    assert "may reach the workers until it is back" in lost["message"]
    # Back (by the next pass, or by hand): both say so.
    conds = Conditions(conds.items, NOW, 1)
    owned.tell(conds, owned.Outcome([], [], []), True, AT)
    assert condition(conds.items, owned.COND_OWNED)["reason"] == "ObjectsAsDeclared"
    assert condition(conds.items, owned.COND_ISOLATED)["status"] == "True"


def test_nothing_said_while_nothing_happened() -> None:
    conds = Conditions([], NOW, 1)
    owned.tell(conds, owned.Outcome([], [], []), True, AT)
    assert conds.items == [] and conds.events == []
    owned.tell(conds, owned.Outcome([], [], [], unseen="listing services: forbidden"), True, AT)
    assert condition(conds.items, owned.COND_OWNED)["reason"] == "OwnedObjectsUnseen"


def test_the_watch_index_wakes_a_job_on_deletions_and_changes_not_on_additions() -> None:
    from ddp_operator.api.ownedwatch import OwnedIndex

    woken: list[tuple[str, str]] = []
    index = OwnedIndex(woken.append)
    svc = {"metadata": {"name": "train", "namespace": "team", "uid": "s1",
                        "labels": {c.LABEL_JOB: "train"}}, "spec": {"ports": []}}  # fmt: skip
    index.apply("Service", [("ADDED", svc)])
    assert woken == [] and ("Service", "train") in index.get(("team", "train"))
    index.apply("Service", [("MODIFIED", svc)])  # the same content (a status, a version)
    assert woken == []
    changed = {**svc, "spec": {"ports": [{"port": 1}]}}
    index.apply("Service", [("MODIFIED", changed)])
    assert woken == [("team", "train")]
    unlabelled = {**changed, "metadata": {**svc["metadata"], "labels": {}}}
    index.apply("Service", [("MODIFIED", unlabelled)])  # gone from the job's view
    assert woken[-1] == ("team", "train") and index.get(("team", "train")) == {}
    index.apply("Service", [("ADDED", svc), ("DELETED", svc)])
    assert len(woken) == 3 and index.get(("team", "train")) == {}
    index.replace("Service", "team", [svc])
    index.replace("Service", "team", [])  # went while the watch was not following
    assert len(woken) == 4
