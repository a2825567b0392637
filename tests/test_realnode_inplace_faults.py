"""In-place restarts (the default) under faults, in real containers on the real node: back-to-back
failures and a worker failing while its group restarts, the operator SIGKILLed in the middle of
a restart, the node's kubelet restarted in the middle of one (real-node-1's, kept for its job
while the node session's other tests run: ``node_1_kept``). Each job ends Succeeded with the
restarts its failures caused, its pods never recreated (the same UIDs), and every process of the
last attempt says that attempt."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from test_realnode_jobs import assert_all_ranks

from ddp_operator.manifests.inplace_pod import ATTEMPT_DIR
from ddp_operator.model import constants as c

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.node_faults import on_node_1
from harness.operator import OperatorProcess
from harness.realnode import kubectl_ddp, restart_kubelet, shell_job

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.node,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("node_1_kept"),
]

ATTEMPT = re.compile(r"ATTEMPT rank=(\d+) attempt=(\d+)")
# The last attempt all-reduces, each process saying its attempt.
TRAIN = """exec torchrun --no-python sh -c \\
  'echo "ATTEMPT rank=$RANK attempt=$DDP_ATTEMPT"; exec python3 examples/scripts/allreduce.py'"""
# A worker that only waits, deaf to SIGTERM (as a process stuck in a collective would be): the
# kubelet kills it on a restart.
WAITS = (
    "exec python3 -c 'import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(600)'"
)
# Worker 1 fails in attempt 0, worker 0 waits there; attempt 1 trains.
ONE_FAILURE = f"""
if [ "$DDP_ATTEMPT" = 0 ]; then
  if [ "$NODE_RANK" = 1 ]; then sleep 2; echo crash; exit 3; fi
  {WAITS}
fi
{TRAIN}
"""


def _uids(cluster: Cluster, ns: str, job: str) -> list[str]:
    return [p["metadata"]["uid"] for p in jobs.workers(cluster, ns, job)]


def _trainer_restarts(cluster: Cluster, ns: str, job: str) -> list[int]:
    pods = jobs.workers(cluster, ns, job)
    return [
        next(s for s in p["status"]["containerStatuses"] if s["name"] == "trainer")["restartCount"]
        for p in pods
    ]


def _started(cluster: Cluster, ns: str, job: str) -> list[str]:
    """The UIDs of both workers once each runs."""
    return wait_for(
        lambda: (
            len(ps := jobs.workers(cluster, ns, job)) == 2
            and all(p["status"].get("phase") == "Running" for p in ps)
            and [p["metadata"]["uid"] for p in ps]
        ),
        timeout=120,
        what="both workers running",
    )


def _restarts(cluster: Cluster, ns: str, job: str) -> int:
    return int(((jobs.get(cluster, ns, job) or {}).get("status") or {}).get("restarts") or 0)


def _succeeded_in_place(
    cluster: Cluster, ns: str, job: str, uids: list[str], restarts: int, record: Any = ""
) -> dict[str, Any]:
    """The job Succeeded after ``restarts`` in-place restarts, with the pods it started with,
    and every rank of the last attempt said it (``record``: what the workers showed, for a
    failure to say)."""
    done = jobs.wait_phase(cluster, ns, job, "Succeeded", timeout=300)
    status = done["status"]
    assert status["restarts"] == restarts == status["inPlaceRestarts"], f"{status}\n{record}"
    assert status["countedRestarts"] == restarts, status
    assert _uids(cluster, ns, job) == uids
    assert not [e for e in jobs.events(cluster, ns, job) if e["reason"] == "WorkerFailed"]
    logs = kubectl_ddp(cluster, "logs", job, "-n", ns)
    assert_all_ranks(logs, 4)
    assert sorted(ATTEMPT.findall(logs)) == [(str(r), str(restarts)) for r in range(4)], logs
    return done


class Record:
    """What each worker showed, every 2 s until stopped: its attempt annotations, its trainer's
    restart count, and what its watch reads (the volume's attempt and ``given``, its own
    ``DDP_ATTEMPT``): a restart that never came says, in the failure, whether the kubelet
    restarted the pod, and what the watch was waiting for."""

    def __init__(self, cluster: Cluster, ns: str, job: str) -> None:
        self.cluster, self.ns, self.job = cluster, ns, job
        self.lines: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="record", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(2):
            try:
                self._look()
            except Exception as exc:  # kept as a line of the record
                self.lines.append(f"{time.strftime('%T')} {exc!r}")

    def _look(self) -> None:
        for pod in jobs.workers(self.cluster, self.ns, self.job):
            meta, name = pod["metadata"], pod["metadata"]["name"]
            told = {k.split("/")[-1]: v for k, v in meta["annotations"].items() if "ddp" in k}
            counts = {
                s["name"]: s["restartCount"] for s in pod["status"].get("containerStatuses", [])
            }
            view = self.cluster.kubectl(
                *("exec", "-n", self.ns, name, "-c", c.WATCH_CONTAINER, "--", "/bin/sh", "-c"),
                f"echo volume=$(cat {ATTEMPT_DIR}/attempt)/$(cat {ATTEMPT_DIR}/given)"
                f" env=${c.ENV_ATTEMPT}",
                check=False,
            )
            seen = (view.stdout or view.stderr).strip()[-200:]
            self.lines.append(f"{time.strftime('%T')} {name} {told} {counts} {seen}")

    def __enter__(self) -> Record:
        return self

    def __exit__(self, *_: object) -> None:
        """Stopped with the test: a thread left running aborted pytest at its exit."""
        self.stop.set()
        self.thread.join(timeout=30)

    def __str__(self) -> str:
        return "\n".join(self.lines[-60:])


def _told(cluster: Cluster, ns: str, job: str) -> list[str]:
    """The attempt each worker was told (its annotation)."""
    return [
        p["metadata"]["annotations"]["ddp-operator.io/attempt"]
        for p in jobs.workers(cluster, ns, job)
    ]


# Alone (serial): beside the node session's other tests it failed once (run 73 of the tests page:
# worker 1 restarted twice where the pause said it was told 2 straight away, the pause's race
# lost under load).
@pytest.mark.serial
def test_back_to_back_failures_one_while_the_group_restarts(
    cluster: Cluster, own_operator: tuple[str, list[OperatorProcess]], images: dict[str, str]
) -> None:
    """Worker 1 fails in attempt 0. Worker 0, told attempt 1 first, restarts and fails at once;
    the operator is paused as soon as worker 0 is told, so that it sees worker 0's restart and
    failure at once, worker 1 not yet told (unless it told worker 1 first: the pause is a race
    this test mostly wins). Worker 1 is then told attempt 2 straight away, and one restart takes
    it there (its count moved past the one when told; counted from its creation it owed two, and
    the group was recreated after the in-place timeout). Attempt 2 trains: two restarts, both in
    place, whichever way it went."""
    ns, ops = own_operator
    script = f"""
case "$DDP_ATTEMPT" in
  0) if [ "$NODE_RANK" = 1 ]; then sleep 2; echo first; exit 3; fi; {WAITS} ;;
  1) if [ "$NODE_RANK" = 0 ]; then echo second; exit 4; fi; {WAITS} ;;
esac
{TRAIN}
"""
    job = shell_job("b2b", ns, images["trainer"], script, procsPerNode=2, backoffLimit=3)
    jobs.apply(cluster, job)
    uids = _started(cluster, ns, "b2b")
    with Record(cluster, ns, "b2b") as record:
        told_0 = lambda: _told(cluster, ns, "b2b")[0] == "1"  # noqa: E731
        wait_for(told_0, timeout=60, interval=0.02, what="worker 0 told 1")
        with ops[0].paused():
            wait_for(
                lambda: (
                    _trainer_restarts(cluster, ns, "b2b")[0] == 1
                    and _trainer_ended(cluster, ns, "b2b-worker-0") == 4
                ),
                timeout=60,
                what="worker 0 restarted and failed in attempt 1",
            )
            skipped = _told(cluster, ns, "b2b") == ["1", "0"]
        done = _succeeded_in_place(cluster, ns, "b2b", uids, 2, record)
        first = done["status"]["firstFailure"]
        assert (first["attempt"], first["worker"], first["exitCode"]) == (1, 0, 4), first
        # Told 2 without 1, worker 1 restarted once; told 1 then 2, twice or more (a restart for 1
        # begun once the ConfigMap said 2 restarts again until the pod is told 2).
        restarts = _trainer_restarts(cluster, ns, "b2b")
        if skipped:
            assert restarts == [2, 1]
        else:
            assert restarts[0] == 2 and restarts[1] >= 2, restarts


def _trainer_ended(cluster: Cluster, ns: str, pod: str) -> int | None:
    """The exit code of the pod's trainer, if it has ended (and not restarted since)."""
    status = cluster.core.read_namespaced_pod(pod, ns).status
    trainer = next(s for s in status.container_statuses or () if s.name == "trainer")
    ended = trainer.state.terminated
    return None if ended is None else ended.exit_code


def test_the_operator_killed_mid_restart_is_taken_over_and_the_restart_completes(
    cluster: Cluster, own_operator: tuple[str, list[OperatorProcess]], images: dict[str, str]
) -> None:
    """Worker 1 fails; the operator records attempt 1 and tells worker 0, whose old trainer
    ignores SIGTERM (5 s to be killed), and is SIGKILLed there, worker 1 not yet told. A new
    operator finds the restart half-done and completes it: one restart, in place."""
    ns, ops = own_operator
    job = shell_job("killed", ns, images["trainer"], ONE_FAILURE, procsPerNode=2, backoffLimit=1)
    jobs.apply(cluster, job)
    uids = _started(cluster, ns, "killed")
    wait_for(lambda: _restarts(cluster, ns, "killed") == 1, timeout=60, what="attempt 1 decided")
    ops[0].kill()
    # Worker 1 not told yet: it waits for worker 0's old trainer to end.
    assert _told(cluster, ns, "killed")[1] == "0"
    ops.append(OperatorProcess(cluster, ns).start())
    ops[-1].wait_ready()
    _succeeded_in_place(cluster, ns, "killed", uids, 1)
    assert _trainer_restarts(cluster, ns, "killed") == [1, 1]


def test_the_kubelet_restarted_mid_restart_loses_nothing(
    cluster: Cluster, namespace: str, operator, images: dict[str, str]
) -> None:
    """Worker 1 fails; once worker 0 is told attempt 1 (its old trainer deaf to SIGTERM), the
    kubelet of the node they run on (real-node-1, kept for them) is stopped and started again:
    the restart completes in place."""
    job = shell_job(
        "kubelet", namespace, images["trainer"], ONE_FAILURE, procsPerNode=2, backoffLimit=1
    )
    job = on_node_1(job)
    jobs.apply(cluster, job)
    uids = _started(cluster, namespace, "kubelet")
    told = lambda: _told(cluster, namespace, "kubelet")[0] == "1"  # noqa: E731
    wait_for(told, timeout=60, what="worker 0 told attempt 1")
    restart_kubelet(1)
    _succeeded_in_place(cluster, namespace, "kubelet", uids, 1)
