"""pytest plugin: the cluster, a fresh namespace per test, the CRD and the operator.

Markers: ``cluster`` (needs an API server: the local one, or KUBECONFIG), ``torch`` (real
torch.distributed processes), ``node`` (real containers on the local cluster's real node),
``docker`` and ``gpu`` (skipped, with the reason, where absent), ``last`` (runs after all others:
it takes the real node down).
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes import config as k8s_config

from harness import node_faults, nodes, pods, realnode, schedule
from harness.cluster import CRD_FILE, ROOT, Cluster, connect, disconnect, exclusively, wait_for
from harness.operator import OperatorProcess
from harness.reporting import Reporting, reporting_in

KUEUE_SH = ROOT / "hack" / "cluster" / "kueue.sh"
COSCHEDULING_SH = ROOT / "hack" / "cluster" / "coscheduling.sh"
VOLCANO_SH = ROOT / "hack" / "cluster" / "volcano.sh"
MULTIKUEUE_SH = ROOT / "hack" / "cluster" / "multikueue.sh"
WORKER_KUBECONFIG = ROOT / ".cluster" / "peers" / "worker" / "kubeconfig"
# Fixtures whose programs make test builds meanwhile.
LATE = ("coscheduling", "volcano", "kueue", "multikueue")
LATE_TIMEOUT = 1800  # seconds: such a test's timeout, its program's cold build included

# Per test session, so that sessions sharing one cluster (and their operators) never meet.
TEST_NS_PREFIX = f"ddpt-{uuid.uuid4().hex[:4]}-"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    docker = (
        shutil.which("docker")
        and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )
    gpu = shutil.which("nvidia-smi") is not None
    for item in items:
        if "docker" in item.keywords and not docker:
            item.add_marker(pytest.mark.skip(reason="needs a running Docker engine (kind)"))
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi)"))

    # The tests of scheduler-plugins, Volcano, then Kueue, just before the last ones: on a cold
    # machine they build meanwhile, in that order (make test).
    def late(item: pytest.Item) -> int:
        needs = set(getattr(item, "fixturenames", ()))
        return next((i for i, f in enumerate(LATE, 1) if f in needs), 0)

    # On a cold machine the program a late test needs may still build (at the lowest priority,
    # beside the suite) when the test comes: its wait for the build counts in its timeout.
    for item in items:
        if late(item):
            own = item.get_closest_marker("timeout")
            given = float(own.args[0]) if own and own.args else 0.0
            item.add_marker(pytest.mark.timeout(max(given, LATE_TIMEOUT)), append=False)

    # In an xdist worker (make test's node session), the order of harness/schedule.py: its
    # scheduler (below) hands out the groups as they first come.
    placed: dict[int, tuple[float, int, int]] = {}
    if hasattr(config, "workerinput"):
        placed = schedule.keys(items, schedule.group_seconds(schedule.last_durations()))

    # An early test starts slow work (real pods) that runs beside the others; a last one ends it.
    items.sort(
        key=lambda item: (
            item.get_closest_marker("early") is None,
            item.get_closest_marker("last") is not None,
            late(item),
            placed.get(id(item), (0.0, 0, 0)),
        )
    )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with harness/schedule.py's groups for files."""
    return schedule.scheduler(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed cluster test's report carries what its namespace holds and the operator's log
    tail, so that a failure seen once (in CI) can be explained without running it again."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    if report.failed and call.when == "call" and "cluster" in funcargs:
        cluster, ns = funcargs["cluster"], funcargs.get("namespace")
        if ns:
            got = cluster.kubectl(
                "get",
                "ddpj,pods,events",
                "-n",
                ns,
                "-o",
                "wide",
                "--request-timeout=20s",
                check=False,
            )
            report.sections.append((f"namespace {ns}", got.stdout + got.stderr))
        op = funcargs.get("operator")
        if isinstance(op, OperatorProcess):
            tail = "\n".join(op.output().splitlines()[-150:])
            report.sections.append(("operator log (last 150 lines)", tail))
    return report


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The cluster of this test session."""
    c = connect()
    try:
        yield c
    finally:
        disconnect(c)


@pytest.fixture(scope="session")
def images(cluster: Cluster) -> dict[str, str]:
    """The real node up, with its images (python, trainer, operator): their names."""
    if not cluster.local:
        pytest.skip("the real node joins the local cluster only (hack/cluster/realnode.sh)")
    with exclusively("realnode"):
        return realnode.images()


@pytest.fixture(scope="session")
def foreign_images(images: dict[str, str]) -> realnode.ForeignImages:
    """The images that carry nothing of the project (tests/images/), on the real node: their
    names by folder, each made ready when a test first asks for it (``ForeignImages``)."""
    return realnode.ForeignImages()


@pytest.fixture(scope="session")
def crd(cluster: Cluster) -> str:
    """The DDPJob CRD, applied and Established. Every session (and each xdist worker) applies it
    at once on a new cluster: Established is read from the API, as a `kubectl wait` that failed
    in 1.5 s in one of them did not say why (run 57 of the tests page)."""
    name = "ddpjobs.ddp-operator.io"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    crds = client.ApiextensionsV1Api(cluster.api)

    def established() -> bool:
        conditions = crds.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, timeout=60, what=f"crd/{name} Established")
    return name


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace, deleted after the test. Its pods land on the fake nodes (kwok), but in
    tests marked ``node`` (real containers), where pods that ask for nothing go to the real node."""
    name = f"{TEST_NS_PREFIX}{uuid.uuid4().hex[:6]}"
    if request.node.get_closest_marker("node"):
        cluster.core.create_namespace({"metadata": {"name": name}})
    else:
        cluster.core.create_namespace(nodes.fake_nodes_namespace(name))
    # The namespace's default ServiceAccount must exist before pods can be created in it.
    wait_for(
        lambda: cluster.core.list_namespaced_service_account(name).items,
        timeout=30,
        interval=0.05,
        what=f"serviceaccount in {name}",
    )
    yield name
    cluster.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def quiet(cluster: Cluster, crd: str) -> Iterator[str]:
    """A fresh namespace no operator watches (the session's watches ``ddpt-*``), with the CRD."""
    name = f"ddpq-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(nodes.fake_nodes_namespace(name))
    wait_for(lambda: cluster.core.list_namespaced_service_account(name).items, 30, 0.05, "sa")
    yield name
    cluster.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def pool(cluster: Cluster, namespace: str) -> Iterator[str]:
    """4 fake nodes of 8 GPUs that only this test's pods tolerate; deleted after it."""
    if not cluster.local:
        pytest.skip("adds fake nodes to the local kwok cluster (hack/cluster/cluster.sh)")
    template = next(
        n
        for n in yaml.safe_load_all(pods.NODES_FILE.read_text())
        if n and "gpu" in n["metadata"]["name"]
    )
    names = [f"{namespace}-gpu-{i}" for i in range(4)]
    nodes = []
    for name in names:
        node = copy.deepcopy(template)
        node["metadata"]["name"] = name
        node["metadata"]["labels"] |= {"kubernetes.io/hostname": name, pods.POOL_LABEL: namespace}
        taint = {"key": pods.POOL_LABEL, "value": namespace, "effect": "NoSchedule"}
        node["spec"] = {"taints": [taint]}
        nodes.append(node)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(nodes))
    try:
        for name in names:
            cluster.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=60s")
        yield namespace
    finally:  # one a test took away already gone
        cluster.kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false")


def running(cluster: Cluster, script: Path, api: str, what: str) -> None:
    """A program the tests need besides the cluster: on the local cluster started by its
    hack/cluster script (and stopped with the cluster); on another, it must be installed (its
    API served), else the test is skipped."""
    if cluster.local:
        with exclusively("addons"):  # multikueue.sh runs kueue.sh too
            subprocess.run([str(script), "up"], check=True)
    elif api not in cluster.kubectl("api-versions").stdout.split():
        pytest.skip(f"{what} ({api}) is not installed on this cluster")


@pytest.fixture(scope="session")
def kueue(cluster: Cluster) -> None:
    """Kueue running, with its pod integration."""
    running(cluster, KUEUE_SH, "kueue.x-k8s.io/v1beta2", "Kueue")


@pytest.fixture(scope="session")
def multikueue(cluster: Cluster, crd: str) -> Iterator[Cluster]:
    """A second local cluster, MultiKueue's worker (hack/cluster/multikueue.sh: its own control
    plane and kwok nodes, Kueue on both, MultiKueue connected), with an operator of its own
    watching the tests' namespaces: the worker cluster."""
    if not cluster.local:
        pytest.skip("brings up a second local cluster beside the local one (multikueue.sh)")
    with exclusively("addons"):
        subprocess.run([str(MULTIKUEUE_SH), "up"], check=True)
    api = k8s_config.new_client_from_config(config_file=str(WORKER_KUBECONFIG))
    worker = Cluster(kubeconfig=WORKER_KUBECONFIG, local=True, started_here=False, api=api)
    try:
        with _operator_on(worker):
            yield worker
    finally:
        api.close()


@pytest.fixture(scope="session")
def coscheduling(cluster: Cluster) -> None:
    """scheduler-plugins' scheduler with Coscheduling, as scheduler-plugins-scheduler, and its
    PodGroup CRD."""
    running(cluster, COSCHEDULING_SH, "scheduling.x-k8s.io/v1alpha1", "scheduler-plugins")


@pytest.fixture(scope="session")
def volcano(cluster: Cluster) -> None:
    """Volcano: scheduler, controller manager, PodGroup and Queue webhooks."""
    running(cluster, VOLCANO_SH, "scheduling.volcano.sh/v1beta1", "Volcano")


@pytest.fixture(scope="module")
def reporting(cluster: Cluster, crd: str, images: dict[str, str]) -> Iterator[Reporting]:
    """An operator with the progress endpoint, in a namespace of its own, for a module's tests
    (``harness.reporting``)."""
    with reporting_in(cluster) as r:
        yield r


@pytest.fixture(scope="module")
def node_1_kept(cluster: Cluster) -> Iterator[None]:
    """real-node-1 for the jobs of a module that loses it, restarts its kubelet or stops its
    NetworkPolicy engine, while the node session's other tests run (``node_faults.kept``)."""
    with node_faults.kept(cluster):
        yield


@pytest.fixture(scope="session")
def operator(cluster: Cluster, crd: str) -> Iterator[OperatorProcess]:
    """One operator process for the session, watching the tests' namespaces."""
    with _operator_on(cluster) as proc:
        yield proc


@pytest.fixture
def own_operator(cluster: Cluster, crd: str) -> Iterator[tuple[str, list[OperatorProcess]]]:
    """A namespace of its own (not one the session's operator watches; its pods go to the real
    node) and its operator, which a test may kill and start again (the last one started is
    stopped at the end)."""
    ns = f"own-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, timeout=30, what="sa")
    ops = [OperatorProcess(cluster, ns).start()]
    try:
        ops[0].wait_ready()
        yield ns, ops
    finally:
        ops[-1].stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")


@contextlib.contextmanager
def _operator_on(cluster: Cluster) -> Iterator[OperatorProcess]:
    """An operator process watching the tests' namespaces of ``cluster``, ready."""
    proc = OperatorProcess(cluster, f"{TEST_NS_PREFIX}*").start()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()
        if os.environ.get("DDP_SHOW_OPERATOR_LOG"):
            print(proc.output())
