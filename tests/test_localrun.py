"""Unit tests of `kubectl ddp local`'s pure parts: expansion, hosts, process descriptions."""

from __future__ import annotations

from ddp_operator.commands import localrun
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def test_expand_follows_the_kubelet_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert localrun.expand("$(A)-$(B)", env) == "1-two"
    assert localrun.expand("$(MISSING) stays", env) == "$(MISSING) stays"
    assert (
        localrun.expand("$$(A) is escaped, $$ is one dollar", env)
        == "$(A) is escaped, $ is one dollar"
    )
    assert localrun.expand("$A and ${B} are shell syntax", env) == "$A and ${B} are shell syntax"


def test_worker_processes_render_the_operator_pods() -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "ignored",
                    "command": ["torchrun"],
                    "args": ["--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)", "train.py"],
                    "env": [
                        {"name": "ENDPOINT", "value": "$(MASTER_ADDR):$(MASTER_PORT)"},
                        {
                            "name": "SECRET",
                            "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
                        },
                    ],
                    "workingDir": "/tmp",
                }
            ]
        }
    }
    job = resolve(ddpjob("j", "ns", nodes=2, template=template))
    procs = localrun.worker_processes(job, {"PATH": "/bin"})
    assert [p.name for p in procs] == ["j-worker-0", "j-worker-1"]
    p1 = procs[1]
    assert p1.argv == ["torchrun", "--rdzv_endpoint=j-worker-0.j:29500", "train.py"]
    assert p1.env["ENDPOINT"] == "j-worker-0.j:29500"
    assert p1.env["NODE_RANK"] == "1" and p1.env["PATH"] == "/bin"
    assert p1.cwd == "/tmp"
    assert "SECRET" not in p1.env and any("valueFrom" in w for w in p1.warnings)


def test_hosts_file_gives_each_worker_its_own_loopback_address() -> None:
    job = resolve(ddpjob("j", "ns", nodes=3))
    hosts = localrun.hosts_file(job)
    assert "127.0.1.1 j-worker-0.j j-worker-0.j.ns.svc j-worker-0" in hosts
    assert "127.0.1.3 j-worker-2.j j-worker-2.j.ns.svc j-worker-2" in hosts
    assert localrun.loopback(255) == "127.0.2.0"


def test_rewrite_fallback_replaces_dns_names() -> None:
    job = resolve(ddpjob("j", "ns", nodes=2))
    proc = localrun.worker_processes(job, {})[1]
    proc.argv = ["python", "--master=j-worker-0.j"]
    localrun.rewrite_hosts(proc, job)
    assert proc.env["MASTER_ADDR"] == "127.0.1.1"
    assert proc.env["VC_WORKER_HOSTS"] == "127.0.1.1,127.0.1.2"
    assert proc.argv[1] == "--master=127.0.1.1"


def test_outcome_exit_status_is_the_failed_workers_code() -> None:
    assert localrun.Outcome(True, "", {0: 0}).exit_status == 0
    assert localrun.Outcome(False, "", {0: -15, 1: 3}).exit_status == 3
    assert localrun.Outcome(False, "", {0: -9}).exit_status == 1
