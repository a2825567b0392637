"""The Python SDK: the job a train() call makes, the local backend running real torch
processes, and what a client's with block deletes (the cluster client is tested on the real
node: test_realnode_progress; the manifest's options: test_sdk_manifest)."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from ddp_operator.decide import presence
from ddp_operator.model.constants import DEFAULT_MASTER_PORT
from ddp_operator.sdk import Client, JobFailed, LocalClient, SDKError, job_manifest

from harness.cluster import Cluster


def allreduce_and_report() -> None:
    import os
    import sys

    import torch
    import torch.distributed as dist

    from ddp_operator.progress import report

    dist.init_process_group("gloo")
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    for step in range(1, 6):
        report(step, 5, loss=1.0 / step)
    # One write per line: the two processes of a worker share its output.
    sys.stdout.write(
        f"SUM {t.item():.0f} rank {dist.get_rank()} attempt {os.environ['DDP_ATTEMPT']}\n"
    )
    dist.destroy_process_group()


def test_a_script_or_a_function_becomes_a_ddpjob_under_torchrun() -> None:
    job = job_manifest("examples/scripts/progress_train.py", image="img", nodes=3, args=["-x"])
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert job["metadata"]["name"].startswith("progress-train-") and job["spec"]["nodes"] == 3
    assert trainer["args"] == ["torchrun", "examples/scripts/progress_train.py", "-x"]
    fn = job_manifest(allreduce_and_report, image="img", procs_per_node=2, backend="gloo")
    args = fn["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == ["torchrun", "--no-python", "python", "-c"]
    assert "def allreduce_and_report" in args[4] and args[4].endswith("allreduce_and_report()\n")
    assert fn["spec"]["procsPerNode"] == 2 and fn["spec"]["backend"] == "gloo"


def test_bad_input_is_refused_before_anything_runs() -> None:
    client = LocalClient()
    with pytest.raises(SDKError, match="not a valid DDPJob"):
        client.submit(job_manifest("x.py", image="i", nodes=0))
    with pytest.raises(SDKError, match="404"):
        client.get("nothing")


@pytest.mark.torch
def test_the_local_backend_runs_waits_logs_and_reports_progress() -> None:
    """Its rendezvous port taken on this machine (by another local run, say), the job runs on
    another and says so."""
    client = LocalClient()
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past earlier runs' TIME_WAIT
        with contextlib.suppress(OSError):  # taken already: as well
            taken.bind(("", DEFAULT_MASTER_PORT))
            taken.listen()
        name = client.train(allreduce_and_report, nodes=2, procs_per_node=2, name="local-sdk")
        streamed = list(client.stream(name))  # as they come, until the processes end
    assert sum("SUM 10" in line for line in streamed) == 4, "\n".join(streamed)
    said = f"the rendezvous port {DEFAULT_MASTER_PORT} (spec.masterPort) is in use"
    assert any(said in line for line in streamed), "\n".join(streamed)
    job = client.wait(name, timeout=180)
    assert job["status"]["phase"] == "Succeeded"
    logs = client.logs(name)
    assert sorted(x.split("| ")[1] for x in logs.splitlines() if "SUM" in x) == [
        f"SUM 10 rank {r} attempt 0" for r in range(4)
    ], logs
    assert "SUM 10 rank 2" in client.logs(name, worker=1)
    progress = client.progress(name)
    assert progress and progress["step"] == 5 and progress["percent"] == 100.0, progress
    assert [j["metadata"]["name"] for j in client.list()] == [name]
    with pytest.raises(SDKError, match="409"):
        client.train(allreduce_and_report, name=name)
    client.delete(name)
    assert client.list() == []


@pytest.mark.torch
def test_the_local_backend_says_why_a_job_failed_and_suspends_and_resumes(tmp_path: Path) -> None:
    client = LocalClient()
    bad = client.train("no/such/script.py", nodes=1, name="bad")
    with pytest.raises(JobFailed, match=r"ddpjob bad ended Failed: .*worker"):
        client.wait(bad, timeout=120)
    # Ends after 60 s, leaving a mark; stopped, it leaves none.
    script, mark = tmp_path / "slow.py", tmp_path / "finished"
    script.write_text("import sys, time\ntime.sleep(60)\nopen(sys.argv[1], 'w').close()\n")
    slow = client.train(str(script), nodes=1, args=[str(mark)])
    client.wait(slow, "Running", timeout=30)
    client.suspend(slow)
    assert client.get(slow)["status"]["phase"] == "Suspended"
    client.resume(slow)
    assert client.get(slow)["status"] == {"phase": "Running", "restarts": 1}
    client.delete(slow)  # stops the resumed run's processes (it once waited for their end)
    assert not mark.exists()


def wait_in_a_with_block(client: Client | LocalClient, manifest: dict, other: str = "") -> str:
    """Submit ``manifest`` (and ``other``, deleted at once) and wait 1 s for it to succeed, in
    the client's with block; the job's name."""
    with client:
        name = client.submit(manifest)
        if other:
            client.delete(client.submit(job_manifest("t.py", image="i", name=other)))
        client.wait(name, timeout=1)
    return name


@pytest.mark.cluster
def test_a_client_deletes_the_jobs_it_submitted_when_its_with_block_ends(
    cluster: Cluster, quiet: str
) -> None:
    """No operator watches ``quiet``: the job stays Pending, so the wait times out, and the
    with block still leaves nothing behind (one deleted in it already: fine)."""
    client = Client(namespace=quiet, kubeconfig=str(cluster.kubeconfig))
    job = job_manifest("t.py", image="i", name="kept", resources={"requests": {"cpu": "1"}})
    with pytest.raises(TimeoutError, match="ddpjob kept is Pending, not Succeeded"):
        wait_in_a_with_block(client, job, other="gone")
    assert client.submitted == []
    with Client(namespace=quiet, kubeconfig=str(cluster.kubeconfig)) as other:
        assert other.list() == []


@pytest.mark.cluster
def test_a_client_says_when_no_operator_picked_its_job_up(
    cluster: Cluster, quiet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No operator watches ``quiet``: wait's TimeoutError says so (after a window of 1 s here,
    30 s by default)."""
    monkeypatch.setenv("DDP_PICKUP_WINDOW", "1")
    with Client(namespace=quiet, kubeconfig=str(cluster.kubeconfig)) as client:
        name = client.submit(job_manifest("t.py", image="i", name="lonely"))
        with pytest.raises(TimeoutError) as raised:
            client.wait(name, timeout=3)
    assert str(raised.value) == (
        f"ddpjob lonely is Pending, not Succeeded, after 3 s: no operator has picked up "
        f"ddpjob/lonely in namespace {quiet} after 1 s: is one running and watching {quiet}?"
    )


@pytest.mark.cluster
def test_a_client_says_when_the_cluster_has_no_crd(cluster: Cluster, quiet: str) -> None:
    """The real API server's answer for a resource it does not serve: the CRD cannot be deleted
    beside the other tests, so the client asks here for a group no CRD defines. A job that is
    not there, on a cluster with the CRD, keeps its own message."""
    client = Client(namespace=quiet, kubeconfig=str(cluster.kubeconfig))
    with pytest.raises(SDKError, match=r'^get_namespaced_custom_object: 404 .*"nope" not found'):
        client.get("nope")
    client.resource = ("absent.ddp-operator.io", "v1alpha1", "ddpjobs")
    calls = (
        lambda: client.get("nope"),
        client.list,
        lambda: client.submit(job_manifest("t.py", image="i")),
        lambda: client.wait("nope"),
        lambda: client.delete("nope"),
    )
    for call in calls:
        with pytest.raises(SDKError) as raised:
            call()
        assert str(raised.value) == presence.NO_CRD and raised.value.status == 404
    client.close()


@pytest.mark.torch
def test_a_local_client_stops_its_jobs_when_its_with_block_ends(tmp_path: Path) -> None:
    script, mark = tmp_path / "slow.py", tmp_path / "finished"
    script.write_text("import sys, time\ntime.sleep(30)\nopen(sys.argv[1], 'w').close()\n")
    client = LocalClient()
    job = client.job_manifest(str(script), nodes=1, args=[str(mark)])
    with pytest.raises(TimeoutError, match="is Running, not Succeeded"):
        wait_in_a_with_block(client, job)
    assert client.list() == [] and not mark.exists()
