"""Who may cost the API server a review (``report_gate``): only a token naming a worker pod of a
job the operator runs, sent from that pod's address or a trusted network, each pod within a
budget of its own."""

from __future__ import annotations

import base64
import json

import pytest

from ddp_operator.decide import report_gate
from ddp_operator.decide.report_gate import Claim, ReviewBudget, claim_of, networks, refusal
from ddp_operator.model.workers import WorkerPod

WORKER = WorkerPod(name="j-worker-0", index=0, attempt=0, uid="uid-0", ips=("198.18.0.7",))


def token(ns: str, pod: str, uid: str) -> str:
    """A token shaped as the kubelet's (its payload's ``kubernetes.io`` claims), unsigned."""

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {"sub": f"system:serviceaccount:{ns}:default"}
    claims["kubernetes.io"] = {"namespace": ns, "pod": {"name": pod, "uid": uid}}  # type: ignore[assignment]
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_a_pod_token_s_claim_names_its_pod_and_anything_else_names_none() -> None:
    assert claim_of(token("team-a", "j-worker-0", "uid-0")) == Claim(
        "team-a", "j-worker-0", "uid-0"
    )
    assert claim_of("a.b.c") is None  # no JSON
    assert claim_of("a.e30.c") is None  # {}: no pod
    assert claim_of(token("team-a", "", "uid-0")) is None
    assert claim_of("x" * 9000 + ".e30.c") is None  # too long to read
    nested = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")
    assert claim_of(f"a.{nested}.c") is None  # JSON deeper than the parser goes


def test_only_a_worker_pod_of_ours_from_its_own_address_or_a_trusted_network_is_reviewed() -> None:
    workers = {WORKER.uid: WORKER}.get
    claim = Claim("team-a", "j-worker-0", "uid-0")
    loopback = networks(report_gate.LOOPBACK)
    own, shared = ("", "uid-0/own"), ("", "uid-0/shared")
    assert refusal("198.18.0.7", claim, workers, ()) == own
    assert refusal("::ffff:198.18.0.7", claim, workers, ()) == own  # a dual-stack listener
    assert refusal("127.0.0.1", claim, workers, loopback) == shared
    assert refusal("::1", claim, workers, loopback) == shared
    assert (
        "comes from 198.18.0.9, not pod j-worker-0's address"
        in refusal("198.18.0.9", claim, workers, loopback)[0]
    )
    assert "not pod" in refusal("127.0.0.1", claim, workers, ())[0]  # trusted only if told
    renamed = Claim("team-a", "j-worker-1", "uid-0")  # the UID of one pod, the name of another
    assert "no worker of a job" in refusal("198.18.0.7", renamed, workers, ())[0]
    unknown = Claim("team-b", "x", "uid-x")
    assert refusal("198.18.0.7", unknown, workers, ()) == (
        "pod team-b/x is no worker of a job this operator runs",
        "",
    )
    assert "names no pod" in refusal("198.18.0.7", None, workers, ())[0]
    # A worker whose address the watch has not seen yet: its first report may come first.
    pending = {"uid-0": WorkerPod(name="j-worker-0", index=0, attempt=0, uid="uid-0")}.get
    assert refusal("198.18.0.9", claim, pending, ()) == shared
    # An IPv6 pod's address, however it is written.
    v6 = WorkerPod(name="j-worker-0", index=0, attempt=0, uid="uid-0", ips=("fd00:0::7",))
    assert refusal("fd00::7", claim, {"uid-0": v6}.get, ()) == own


def test_trusted_networks_are_parsed_and_a_bad_one_is_named() -> None:
    assert [str(n) for n in networks(["10.1.2.3/16", " ::1/128"])] == ["10.1.0.0/16", "::1/128"]
    with pytest.raises(ValueError, match="'nonsense'"):
        networks(["10.0.0.0/8", "nonsense"])


def test_each_pod_has_a_review_budget_of_its_own() -> None:
    """One key spending its budget leaves every other whole (a pod's own budget, for what comes
    from its address, is no one else's); a spent budget comes back at its rate."""
    budget = ReviewBudget(per_second=0.5, burst=2)
    assert [budget.spend("uid-a", 100.0) for _ in range(3)] == [True, True, False]
    assert budget.spend("uid-b", 100.0) and budget.spend("uid-b", 100.0)
    assert not budget.spend("uid-a", 101.0)  # half a review back
    assert budget.spend("uid-a", 102.0)  # one
    assert not budget.spend("uid-a", 102.0)


def test_the_budgets_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = ReviewBudget(per_second=1.0, burst=1)
    monkeypatch.setattr(report_gate, "MAX_BUDGETS", 4)
    for i in range(4):
        assert budget.spend(f"uid-{i}", 0.0)
    assert budget.spend("uid-new", 10.0)  # the old ones are full again: forgotten
    assert len(budget._left) == 1
