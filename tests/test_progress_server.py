"""Who sent a report: the pod a TokenReview's answer names (the API server's answers as the
real one gives them are checked on the real node: test_realnode_progress)."""

from __future__ import annotations

from ddp_operator.api.progress_server import Sender, sender_of

POD = {
    "authenticated": True,
    "audiences": ["ddp-operator.io/progress"],
    "user": {
        "username": "system:serviceaccount:team-a:default",
        "extra": {
            "authentication.kubernetes.io/pod-name": ["j-worker-0"],
            "authentication.kubernetes.io/pod-uid": ["uid-0"],
        },
    },
}


def test_a_pod_token_names_its_pod() -> None:
    assert sender_of({"status": POD}) == Sender("team-a", "j-worker-0", "uid-0")


def test_other_tokens_are_refused_saying_why() -> None:
    rejected = sender_of({"status": {"authenticated": False, "error": "token has expired"}})
    assert rejected.refused == "the token is not valid: token has expired"
    user = {**POD, "user": {"username": "alice", "extra": {}}}
    assert sender_of({"status": user}).refused == "the token is no pod's service account token"
    unbound = {**POD, "user": {**POD["user"], "extra": {}}}
    assert "no pod's" in sender_of({"status": unbound}).refused


def test_the_operator_needs_the_url_pods_reach_it_by_when_it_listens_everywhere(capsys) -> None:
    import pytest

    from ddp_operator.commands import cli

    with pytest.raises(SystemExit) as refused:
        cli.main(["run", "-A", "--progress-address", "0.0.0.0:8090"])
    assert refused.value.code == 2
    assert "--progress-url is needed" in capsys.readouterr().err


def test_a_token_for_another_audience_is_refused() -> None:
    """A token of the pod's own service account, made for another audience (the API server's
    default one, say), is no progress token."""
    other = {**POD, "audiences": ["https://kubernetes.default.svc"]}
    assert "not for the audience ddp-operator.io/progress" in sender_of({"status": other}).refused


def test_a_token_the_api_server_vouched_for_is_never_held_by_the_budget() -> None:
    """The pod's own token, reviewed once, is reviewed again (its answer expired) though the
    pod's budget of new reviews is spent; a new token of the pod is then held (429), and a
    token of a pod that is no worker of ours, or sent from another address, is never reviewed."""
    import asyncio
    import json

    import pytest
    from test_report_gate import WORKER, token

    from ddp_operator.api.progress_server import Busy, TokenReviewer
    from ddp_operator.decide.report_gate import ReviewBudget

    class Reviews:
        asked = 0

        async def _call(self, *args, **kw) -> bytes:
            Reviews.asked += 1
            return json.dumps({"status": POD}).encode()

    workers = {WORKER.uid: WORKER}
    reviewer = TokenReviewer(Reviews(), workers.get, (), ReviewBudget(per_second=1e-9, burst=1))  # type: ignore[arg-type]
    own = token("team-a", "j-worker-0", "uid-0")
    assert asyncio.run(reviewer.sender(own, "198.18.0.7")).pod == "j-worker-0"
    reviewer._seen.clear()  # its answer expired; the budget is spent
    assert asyncio.run(reviewer.sender(own, "198.18.0.7")).pod == "j-worker-0"
    with pytest.raises(Busy, match="too many new tokens of pod j-worker-0"):
        asyncio.run(reviewer.sender(own + "x", "198.18.0.7"))
    stranger = asyncio.run(reviewer.sender(own, "198.18.0.99"))
    assert stranger.stranger and "not pod j-worker-0's address" in stranger.refused
    forged = asyncio.run(reviewer.sender(token("team-a", "x", "uid-x"), "198.18.0.7"))
    assert forged.stranger and "no worker of a job this operator runs" in forged.refused
    # Tokens naming the pod from a trusted network (loopback) spend a budget of their own: the
    # pod's own, from its address, is untouched by them.
    assert Reviews.asked == 2
    asyncio.run(reviewer.sender(own + "y", "127.0.0.1"))
    with pytest.raises(Busy):
        asyncio.run(reviewer.sender(own + "z", "127.0.0.1"))
    assert Reviews.asked == 3
