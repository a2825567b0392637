"""A hot standby (``standby``): two replicas peered through kopf, the primary (priority 100) active
and the standby (50) paused; the primary killed in the middle of an in-place restart, the standby
takes over and acts; the primary comes back, the standby pauses and stops acting. A failure on
each side: the job Succeeded with exactly the restarts its failures caused, its pods never
created twice (the same UIDs, each scheduled once)."""

from __future__ import annotations

import asyncio
import inspect
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kopf._core.engines import daemons
from test_chart import peering_crds, render
from test_realnode_inplace_faults import ATTEMPT, TRAIN, WAITS

from ddp_operator.act.standby import Standby
from ddp_operator.api.kube import Kube
from ddp_operator.api.transport import StatusConflict

from harness import jobs
from harness.cluster import Cluster, wait_for
from harness.operator import OperatorProcess, free_port
from harness.realnode import kubectl_ddp, shell_job, touch
from jobs import ddpjob


def test_kopfs_pause_is_taken_from_the_start_of_its_daemon_killer() -> None:
    """What ``Standby.capture`` relies on in kopf: the daemon killer is handed the pause."""
    assert "operator_paused" in inspect.signature(daemons.daemon_killer).parameters
    original, standby = daemons.daemon_killer, Standby()
    try:
        standby.capture()
        assert not standby.paused()

        class Toggles:
            def is_on(self) -> bool:
                return True

        killer = daemons.daemon_killer(settings=None, memories=None, operator_paused=Toggles())
        killer.close()  # the original's coroutine, never run here
        assert standby.paused()
    finally:
        daemons.daemon_killer = original


PEERING = "ddp-ddp-operator"  # the chart's, for release "ddp"
LIFETIME = "10"  # seconds: the standby takes over this long after the primary is lost


@pytest.fixture
def peered(cluster: Cluster, crd: str) -> Iterator[tuple[str, dict[str, Replica]]]:
    """A namespace of its own with the chart's kopf peering (CRD and object), and a primary
    and a standby operator watching it; the test may kill and start them."""
    ns = f"sb-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, timeout=30, what="sa")
    docs = render("standby.enabled=true", f"watchNamespaces={{{ns}}}")
    crds = peering_crds()  # the chart's crds/, which Helm installs where they are absent
    assert crds and not [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(crds))
    names = [f"crd/{d['metadata']['name']}" for d in crds]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    peering = [d for d in docs if d["kind"] == "KopfPeering"]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(peering))
    ops = {"primary": replica(cluster, ns, 100), "standby": replica(cluster, ns, 50)}
    try:
        for op in ops.values():
            op.wait_ready()
        yield ns, ops
    finally:
        for op in ops.values():
            op.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")


class Replica(OperatorProcess):
    """A peered replica, its progress endpoint on a port of its own."""

    def __init__(self, cluster: Cluster, ns: str, priority: int) -> None:
        port = free_port()
        peering = ("--peering", PEERING, "--priority", str(priority))
        lifetime = ("--peering-lifetime", LIFETIME, "--progress-address", f"127.0.0.1:{port}")
        super().__init__(cluster, ns, *peering, *lifetime)
        self.readyz = f"http://127.0.0.1:{port}/readyz"


def replica(cluster: Cluster, ns: str, priority: int) -> Replica:
    return Replica(cluster, ns, priority).start()  # type: ignore[return-value]


def ready(op: Replica) -> bool:
    """Whether the replica's progress endpoint says it takes reports (a Service's readiness)."""
    try:
        with urllib.request.urlopen(op.readyz, timeout=5) as answer:
            return answer.status == 200
    except urllib.error.HTTPError as refused:
        if refused.code != 503:
            raise
        return False


def _restarts(cluster: Cluster, ns: str) -> int:
    return int(((jobs.get(cluster, ns, "sb") or {}).get("status") or {}).get("restarts") or 0)


# A trainer that waits until the test lets it go (``let_go``): a file in its own container, which
# a restart in place starts afresh.
HELD = "until [ -e /tmp/go ]; do sleep 0.1; done"


def let_go(cluster: Cluster, ns: str, pod: str, attempt: int) -> None:
    """Once ``pod``'s trainer runs ``attempt`` (told it, restarted since), let it go on."""

    def runs() -> bool:
        p = cluster.core.read_namespaced_pod(pod, ns)
        notes = p.metadata.annotations or {}
        trainer = next(s for s in p.status.container_statuses or () if s.name == "trainer")
        return (
            notes.get("ddp-operator.io/attempt") == str(attempt)
            and trainer.restart_count > int(notes.get("ddp-operator.io/restarts-when-told", "-1"))
            and trainer.state.running is not None
        )

    wait_for(runs, timeout=120, what=f"{pod} running attempt {attempt}")
    touch(cluster, ns, pod, "/tmp/go")


DECIDED = re.compile(r"ddpjob \S+/sb: RestartingInPlace: .*\(restart (\d) of backoffLimit")


def group_runs_again(cluster: Cluster, ns: str) -> None:
    """The last restart's group runs (``Restarting`` cleared): the next failure is one of a
    running group, as the test means it, not one that comes while the group still restarts
    (run 43: attempt 3's came so, and its decision then posted no Event and logged no line;
    every restart now does, ``recovery.restarting``)."""
    jobs.wait_condition(cluster, ns, "sb", "Restarting", status="False", timeout=120)


def _decided(op: Replica) -> list[int]:
    """The restarts this replica decided, from its log."""
    return [int(n) for n in DECIDED.findall(op.output())]


@pytest.mark.cluster
@pytest.mark.node
@pytest.mark.timeout(600)
def test_a_standby_takes_over_mid_restart_and_gives_back_without_acting_twice(
    cluster: Cluster, peered: tuple[str, dict[str, Replica]], images: dict[str, str]
) -> None:
    ns, ops = peered
    wait_for(
        lambda: "paused by peering" in ops["standby"].output(), timeout=60, what="standby paused"
    )
    # Its readiness follows kopf's pause (the peering settles within a heartbeat or two).
    wait_for(
        lambda: ready(ops["primary"]) and not ready(ops["standby"]),
        timeout=30,
        what="only the primary ready",
    )
    # Attempt 0: worker 1 fails (the primary restarts the group; killed meanwhile). Attempt 1:
    # worker 1 fails once let go, the standby active (the standby decides). Attempt 2: worker 0
    # fails once let go, the primary back (the primary decides). Attempt 3 trains.
    script = f"""
case "$DDP_ATTEMPT" in
  0) if [ "$NODE_RANK" = 1 ]; then sleep 2; exit 3; fi; {WAITS} ;;
  1) if [ "$NODE_RANK" = 1 ]; then {HELD}; exit 5; fi; {WAITS} ;;
  2) if [ "$NODE_RANK" = 0 ]; then {HELD}; exit 6; fi; {WAITS} ;;
esac
{TRAIN}
"""
    job = shell_job("sb", ns, images["trainer"], script, procsPerNode=2, backoffLimit=3)
    jobs.apply(cluster, job)
    wait_for(lambda: _restarts(cluster, ns) == 1, timeout=120, what="attempt 1 decided")
    ops["primary"].kill()
    wait_for(lambda: ready(ops["standby"]), timeout=60, what="the standby active")
    group_runs_again(cluster, ns)
    let_go(cluster, ns, "sb-worker-1", 1)
    wait_for(lambda: _restarts(cluster, ns) == 2, timeout=120, what="attempt 2 decided")
    # The replica logs its decision once the API server's answer to its status write is back:
    # under load, after the status can be read (seen in CI).
    try:
        wait_for(lambda: _decided(ops["standby"]) == [2], timeout=30, what="its decision")
    except AssertionError as exc:
        raise AssertionError(ops["standby"].output()[-3000:]) from exc
    assert ready(ops["standby"])
    ops["primary"] = replica(cluster, ns, 100)
    ops["primary"].wait_ready()
    wait_for(
        lambda: "paused by peering" in ops["standby"].output().split("resumed by peering")[-1],
        timeout=60,
        what="the standby paused again",
    )
    # A replica that starts is paused by kopf's peering until its first look at its peers
    # (0.35 s after the standby paused, seen in run 37): settled, as at the start, within a
    # heartbeat or two.
    wait_for(
        lambda: ready(ops["primary"]) and not ready(ops["standby"]),
        timeout=30,
        what="only the primary ready again",
    )
    group_runs_again(cluster, ns)
    let_go(cluster, ns, "sb-worker-0", 2)
    done = jobs.wait_phase(cluster, ns, "sb", "Succeeded", timeout=300)
    status = done["status"]
    assert (status["restarts"], status["countedRestarts"], status["inPlaceRestarts"]) == (3, 3, 3)
    assert _decided(ops["primary"]) == [3] and _decided(ops["standby"]) == [2]
    pods = jobs.workers(cluster, ns, "sb")
    scheduled = cluster.core.list_namespaced_event(ns, field_selector="reason=Scheduled").items
    assert sorted(e.involved_object.name for e in scheduled) == ["sb-worker-0", "sb-worker-1"]
    assert [p["metadata"]["labels"]["ddp-operator.io/created-in-attempt"] for p in pods] == [
        "0",
        "0",
    ]
    logs = kubectl_ddp(cluster, "logs", "sb", "-n", ns)
    assert sorted(ATTEMPT.findall(logs)) == [(str(r), "3") for r in range(4)], logs


@pytest.mark.cluster
def test_a_write_from_an_older_view_is_refused(cluster: Cluster, quiet: str) -> None:
    """What keeps a replica acting on an older view (its last writes landing after another's)
    from undoing newer ones: a status write names the job's resourceVersion it was decided
    from, and a tell the attempt the pod was seen at; either refused if the object moved on."""
    kube = Kube(cluster.api)
    jobs.apply(cluster, ddpjob("guarded", quiet, nodes=1))
    seen = jobs.get(cluster, quiet, "guarded")["metadata"]["resourceVersion"]
    newer = asyncio.run(kube.patch_status(quiet, "guarded", {"restarts": 1}, version=seen))
    assert newer and newer != seen
    with pytest.raises(StatusConflict):
        asyncio.run(kube.patch_status(quiet, "guarded", {"restarts": 0}, version=seen))
    assert jobs.get(cluster, quiet, "guarded")["status"]["restarts"] == 1
    pod = {
        "metadata": {"name": "told", "annotations": {"ddp-operator.io/attempt": "1"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    uid = cluster.core.create_namespaced_pod(quiet, pod).metadata.uid
    marks = {"ddp-operator.io/attempt": "0", "ddp-operator.io/told-at": "2026-11-26T12:00:00Z"}
    assert not asyncio.run(kube.tell_pod(quiet, "told", uid, "0", marks))
    assert asyncio.run(
        kube.tell_pod(quiet, "told", uid, "1", {**marks, "ddp-operator.io/attempt": "2"})
    )
    annotations = cluster.core.read_namespaced_pod("told", quiet).metadata.annotations
    assert (
        annotations["ddp-operator.io/attempt"] == "2" and "ddp-operator.io/told-at" in annotations
    )
