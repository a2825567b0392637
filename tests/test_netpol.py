"""The job's NetworkPolicy, built (``netpol``): ingress to the job's pods from its own pods on
every port, plus the user's rules as written; egress untouched; on unless the job or the
operator's default turns it off. Pure."""

from __future__ import annotations

from ddp_operator.manifests.netpol import build_network_policy, isolated
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob

SCRAPER = {
    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
    "ports": [{"port": 8000, "protocol": "TCP"}],
}


def job(**spec):
    body = ddpjob("train", "team", **spec)
    body["metadata"]["uid"] = "u-1"
    return resolve(body)


def test_only_the_jobs_own_pods_come_in_on_every_port() -> None:
    policy = build_network_policy(job())
    own = {"matchLabels": {c.LABEL_JOB: "train"}}
    # Not the job's name: a user's own policy for the job often has it.
    assert policy["metadata"]["name"] == "train-ddp-isolation"
    assert policy["metadata"]["namespace"] == "team"
    (ref,) = policy["metadata"]["ownerReferences"]
    assert ref["uid"] == "u-1" and ref["controller"] is True and ref["kind"] == "DDPJob"
    assert policy["spec"]["podSelector"] == own
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress is the user's
    # One rule, no ports (every port: the process group listens beyond the master port), and
    # its one peer has no namespaceSelector (this namespace only).
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": own}]}]


def test_the_users_rules_come_after_as_written() -> None:
    policy = build_network_policy(job(network={"allow": [SCRAPER]}))
    assert policy["spec"]["ingress"][1:] == [SCRAPER]


def test_the_job_decides_else_the_operator() -> None:
    assert isolated(job(), True) and not isolated(job(), False)
    assert not isolated(job(network={"isolation": False}), True)
    assert isolated(job(network={"isolation": True}), False)
