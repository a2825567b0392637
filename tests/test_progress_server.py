"""Who sent a report: the pod a TokenReview's answer names (the API server's answers as the
real one gives them are checked on the real node: test_realnode_progress)."""

from __future__ import annotations

from ddp_operator.api.progress_server import Sender, sender_of

POD = {
    "authenticated": True,
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


def test_new_tokens_are_reviewed_within_a_bucket_and_strangers_shapes_never() -> None:
    import asyncio

    import pytest

    from ddp_operator.api.progress_server import Busy, TokenReviewer

    reviewer = TokenReviewer(kube=None, per_second=2.0, burst=3)  # type: ignore[arg-type]
    refused = asyncio.run(reviewer.sender("not-a-token"))  # no API call: the kube is None
    assert refused.refused == "the token is no service account token (not a JWT)"
    reviewer._at = 100.0
    assert [reviewer._spend(100.0) for _ in range(4)] == [True, True, True, False]
    assert reviewer._spend(100.5) and not reviewer._spend(100.5)  # 2 a second: one in 0.5 s
    reviewer._allowed, reviewer._at = 0.0, float("inf")  # spent, none back yet
    with pytest.raises(Busy, match="too many new tokens"):
        asyncio.run(reviewer.sender("a.b.c"))


def test_a_token_the_api_server_vouched_for_is_never_held_by_the_bucket() -> None:
    import asyncio
    import json

    from ddp_operator.api.progress_server import TokenReviewer

    class Reviews:
        async def _call(self, *args, **kw) -> bytes:
            return json.dumps({"status": POD}).encode()

    reviewer = TokenReviewer(kube=Reviews(), per_second=1.0, burst=1)  # type: ignore[arg-type]
    assert asyncio.run(reviewer.sender("a.b.c")).pod == "j-worker-0"
    reviewer._seen.clear()  # its answer expired, and strangers spent the bucket
    reviewer._allowed, reviewer._at = 0.0, float("inf")
    assert asyncio.run(reviewer.sender("a.b.c")).pod == "j-worker-0"
