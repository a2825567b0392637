"""The operator's view of the worker pods: the index kept from watch events (unit), and the list
and watch that feed it, on the real API server (a version too old to watch from is listed
again; a deleted pod is told with its last state)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from kubernetes import client
from urllib3.exceptions import ProtocolError

from ddp_operator.api.kube import Kube
from ddp_operator.api.kubewatch import WatchExpired, watch_pods
from ddp_operator.api.podwatch import Handover, PodIndex, PodWatch, digest
from ddp_operator.decide.failures import PodsUnseen, classify
from ddp_operator.model import constants as c
from ddp_operator.model.workers import WorkerPod

from harness.cluster import Cluster


def pod(name: str, job: str | None = "j", ns: str = "ns", uid: str = "", **status: Any) -> dict:
    labels = {c.LABEL_INDEX: name[-1], c.LABEL_ATTEMPT: "0"}
    if job is not None:
        labels[c.LABEL_JOB] = job
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid or name, "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "busybox"}]},
        "status": status,
    }


class Seen:
    """An index with what it told: changed keys and gone pods."""

    def __init__(self) -> None:
        self.changed: list[tuple[str, str]] = []
        self.gone: list[tuple[tuple[str, str], WorkerPod]] = []
        self.index = PodIndex(self.changed.append, lambda k, p: self.gone.append((k, p)))

    def apply(self, events: list[tuple[str, dict]]) -> None:
        self.index.apply(digest(events))


def test_events_keep_each_jobs_pods_and_tell_the_job() -> None:
    s = Seen()
    s.apply([("ADDED", pod("j-worker-0")), ("ADDED", pod("j-worker-1"))])
    s.apply([("MODIFIED", pod("j-worker-1", phase="Running"))])
    pods = {p.name: p.phase for p in s.index.get(("ns", "j"))}
    assert pods == {"j-worker-0": "Pending", "j-worker-1": "Running"}
    assert s.changed == [("ns", "j")] * 3 and s.gone == []
    assert s.index.get(("ns", "other")) == []


def test_a_deleted_pod_is_told_with_its_last_state() -> None:
    s = Seen()
    s.apply([("ADDED", pod("j-worker-0"))])
    s.apply([("DELETED", pod("j-worker-0", phase="Failed"))])
    assert s.index.get(("ns", "j")) == [] and s.index.by_job == {} and s.index.where == {}
    [(key, gone)] = s.gone
    assert key == ("ns", "j") and gone.name == "j-worker-0" and gone.phase == "Failed"


def test_a_pod_whose_job_label_changes_moves_and_both_jobs_are_told() -> None:
    s = Seen()
    s.apply([("ADDED", pod("x-worker-0", job="a"))])
    s.apply([("MODIFIED", pod("x-worker-0", job="b"))])
    assert s.index.get(("ns", "a")) == [] and len(s.index.get(("ns", "b"))) == 1
    assert s.changed[-2:] == [("ns", "a"), ("ns", "b")]


def test_a_pod_whose_labels_are_taken_off_is_gone_for_its_job() -> None:
    # A label-selected watch says DELETED for an object that stops matching; the body it
    # carries has no job label, so the index tells the last state it knew.
    s = Seen()
    s.apply([("ADDED", pod("j-worker-0", phase="Running"))])
    s.apply([("DELETED", pod("j-worker-0", job=None))])
    assert s.index.get(("ns", "j")) == []
    [(key, gone)] = s.gone
    assert key == ("ns", "j") and gone.phase == "Running"


def test_a_list_tells_the_pods_that_went_unwatched_and_only_in_its_namespace() -> None:
    s = Seen()
    s.apply([("ADDED", pod("j-worker-0")), ("ADDED", pod("j-worker-1"))])
    s.apply([("ADDED", pod("j-worker-0", ns="other", uid="o0"))])
    s.index.replace("ns", [pod("j-worker-1", phase="Running")])
    assert [g.name for _, g in s.gone] == ["j-worker-0"]
    assert [p.phase for p in s.index.get(("ns", "j"))] == ["Running"]
    assert len(s.index.get(("other", "j"))) == 1  # another namespace's list did not drop it
    s.index.replace("", [])  # a list of every namespace
    assert s.index.by_job == {} and len(s.gone) == 3


def test_a_pod_without_the_worker_labels_is_left_out() -> None:
    s = Seen()
    stray = pod("j-worker-0")
    del stray["metadata"]["labels"][c.LABEL_INDEX]
    s.apply([("ADDED", stray), ("DELETED", stray)])
    assert s.index.by_job == {} and s.gone == []


def test_changes_from_the_watch_thread_reach_the_loop_in_order_in_few_wake_ups() -> None:
    """A thread hands over 2000 events one by one while the loop is busy: all arrive, in
    order, in far fewer batches than events; a call handed over after them runs after them."""
    batches: list[list[Any]] = []
    done: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handover = Handover(loop, batches.append)
        finished = asyncio.Event()

        def produce() -> None:
            for i in range(2000):
                handover.put([("ADDED", str(i), ("ns", "j"), None)])
            loop.call_soon_threadsafe(lambda: (done.append(sum(map(len, batches))), finished.set()))

        thread = threading.Thread(target=produce)
        thread.start()
        for _ in range(50):  # the loop busy meanwhile, yielding now and then
            sum(range(20000))
            await asyncio.sleep(0)
        await finished.wait()
        thread.join()

    asyncio.run(main())
    uids = [change[1] for batch in batches for change in batch]
    assert uids == [str(i) for i in range(2000)]
    assert done == [2000]  # every change applied before the call that came after them
    assert len(batches) <= 100, len(batches)


def test_pods_that_cannot_be_listed_make_ready_raise_why() -> None:
    """Nothing listens at the API server's address: the jobs waiting for the first list are
    told why (and classify it), rather than waiting for ever."""

    async def main() -> BaseException:
        config = client.Configuration()
        config.host = "http://127.0.0.1:9"  # loopback, nothing listening
        watch = PodWatch(Kube(client.ApiClient(config)), "ns", Seen().index)
        try:
            with pytest.raises(PodsUnseen) as raised:
                await asyncio.wait_for(watch.ready(), timeout=60)
            with pytest.raises(PodsUnseen):  # and again, for each pass that asks
                await watch.ready()
            return raised.value
        finally:
            watch.stop()

    failure = classify(asyncio.run(main()))
    assert failure.reason == "APIUnavailable", failure
    assert failure.message.startswith("listing the pods in namespace ns: "), failure


@pytest.mark.cluster
def test_the_watch_follows_the_api_server_and_lists_again_when_too_far_behind(
    cluster: Cluster, namespace: str
) -> None:
    asyncio.run(_follow(cluster, namespace))


async def _until(check: Any, what: str, timeout: float = 30) -> None:
    for _ in range(int(timeout * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _follow(cluster: Cluster, ns: str) -> None:
    kube = Kube(cluster.api)
    first = pod("j-worker-0", ns=ns)
    for body in (first, pod("j-worker-1", ns=ns)):
        body["metadata"].pop("uid")
        assert await kube.create_pod(body)
    s = Seen()
    watch = PodWatch(kube, ns, s.index)
    try:
        await asyncio.wait_for(watch.ready(), 30)
        assert sorted(p.name for p in s.index.get((ns, "j"))) == ["j-worker-0", "j-worker-1"]
        assert await kube.delete_pod(ns, "j-worker-1", None, force=True)
        await _until(lambda: s.gone, "the deletion")
        assert [(k, g.name) for k, g in s.gone] == [((ns, "j"), "j-worker-1")]
        told = len(s.changed)
        await kube.annotate_pod(ns, "j-worker-0", None, {"seen": "yes"})
        await _until(lambda: s.changed[told:] == [(ns, "j")], "the change")
    finally:
        watch.stop()
    # Stopping ends the watch at once (its thread and connection do not linger).
    await _until(lambda: watch.task.done(), "the watch task to end")
    await _until(
        lambda: not any(t.name == "pod-watch" for t in threading.enumerate()), "the thread to end"
    )
    # The API server keeps events for a while only: a version it no longer has must be listed
    # anew (410). A young watch cache that has dropped no event yet (a cluster just started)
    # replays the current pods instead: then the watch must have delivered them.
    got: list[Any] = []
    timers: list[threading.Timer] = []

    def opened(response: Any) -> None:  # a replaying watch is ended after 3 s
        timers.append(threading.Timer(3, response.shutdown))
        timers[0].start()

    def deliver(events: list[Any], _: str) -> None:
        got.extend(events)

    try:
        await asyncio.to_thread(watch_pods, kube, ns, c.LABEL_JOB, "1", deliver, opened)
    except WatchExpired:
        return
    except ProtocolError:  # ended by the timer
        pass
    finally:
        for timer in timers:
            timer.cancel()
    assert ("ADDED", "j-worker-0") in [(k, b["metadata"]["name"]) for k, b in got], got
