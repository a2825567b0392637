"""The Helm chart: lints strictly, renders, installs, and its ServiceAccount is allowed exactly
what the operator does: it runs a DDPJob to success and through a group restart, and is denied
everything outside its rules."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from harness import jobs, pods
from harness.cluster import CRD_FILE, ROOT, Cluster, tool, wait_for
from harness.jobs import wait_running
from harness.nodes import fake_nodes_namespace
from harness.operator import OperatorProcess
from jobs import ddpjob

CHART = ROOT / "charts" / "ddp-operator"


def helm(cluster: Cluster | None, *args: str) -> subprocess.CompletedProcess:
    cmd = [tool("helm"), *args]
    if cluster is not None:
        cmd += ["--kubeconfig", str(cluster.kubeconfig)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)


PEERING_CRDS = ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}


def _sets(sets: Iterable[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def render(*sets: str, values: Path | None = None) -> list[dict]:
    """The chart's templates as ``helm template`` renders them (not crds/: see peering_crds)."""
    args = ["template", "ddp", str(CHART), "--namespace", "ddp-system", *_sets(sets)]
    if values is not None:
        args += ["--values", str(values)]
    return [d for d in yaml.safe_load_all(helm(None, *args).stdout) if d]


def refused(*sets: str) -> str:
    """helm template's error for values the chart refuses (fails if it renders them)."""
    args = [tool("helm"), "template", "ddp", str(CHART), *_sets(sets)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0, f"rendered: {sets}"
    return done.stderr


def peering_crds() -> list[dict]:
    """kopf's peering CRDs as the chart installs them (its crds/, not a template)."""
    return [yaml.safe_load((CHART / "crds" / f"{name}.yaml").read_text()) for name in PEERING_CRDS]


def rules_of(docs: list[dict]) -> list[dict]:
    return [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]


def operator_roles(docs: list[dict]) -> list[dict]:
    """The operator's own Roles and ClusterRoles (not the users' nor MultiKueue's)."""
    others = ("-edit", "-view", "-multikueue")
    return [
        d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole") and not d["metadata"]["name"].endswith(others)
    ]


def deployments(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}


def test_chart_crd_is_the_crd() -> None:
    """The DDPJob CRD is the top-level one, byte for byte; beside it only kopf's peering CRDs."""
    assert (CHART / "crds" / CRD_FILE.name).read_bytes() == CRD_FILE.read_bytes()
    names = sorted(p.name for p in (CHART / "crds").iterdir())
    assert names == sorted([CRD_FILE.name, *(f"{n}.yaml" for n in PEERING_CRDS)])
    for crd in peering_crds():
        assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["group"] == "kopf.dev"
        assert f"{crd['spec']['names']['plural']}.kopf.dev" == crd["metadata"]["name"]
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1" and version["served"] and version["storage"]
    scopes = {c["spec"]["names"]["kind"]: c["spec"]["scope"] for c in peering_crds()}
    assert scopes == {"ClusterKopfPeering": "Cluster", "KopfPeering": "Namespaced"}


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
def test_peering_crds_are_not_templates_and_the_peering_object_is(mode: str) -> None:
    """Helm's ownership check refuses a template whose object exists already (kopf's CRDs
    installed by another kopf operator or another release); crds/ are created only if absent.
    The release's own peering object stays a template."""
    sets = ["standby.enabled=true"] + (
        ["watchNamespaces={team-a,team-b}"] if mode != "cluster" else []
    )
    docs = render(*sets)
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert not any(
        "CustomResourceDefinition" in p.read_text() for p in (CHART / "templates").iterdir()
    )
    peerings = [(d["kind"], d["metadata"].get("namespace")) for d in docs if "Peering" in d["kind"]]
    if mode == "cluster":
        assert peerings == [("ClusterKopfPeering", None)]
    else:
        assert peerings == [("KopfPeering", "team-a"), ("KopfPeering", "team-b")]
    assert all(d["metadata"]["name"] == "ddp-ddp-operator" for d in docs if "Peering" in d["kind"])
    installed = helm(None, "template", "ddp", str(CHART), "--include-crds", *_sets(sets)).stdout
    crds = {
        d["metadata"]["name"]
        for d in yaml.safe_load_all(installed)
        if d and d["kind"] == "CustomResourceDefinition"
    }
    assert crds == {"ddpjobs.ddp-operator.io", *PEERING_CRDS}
    assert not [d for d in render() if "Peering" in d["kind"]]  # no standby: no peering object


def test_helm_lint_strict() -> None:
    out = helm(None, "lint", "--strict", str(CHART)).stdout
    assert "0 chart(s) failed" in out


def test_values_schema_refuses_bad_values() -> None:
    bad = subprocess.run(
        [tool("helm"), "template", "x", str(CHART), "--set", "apiConcurrency=0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "apiConcurrency" in bad.stderr


@pytest.mark.parametrize(
    ("typo", "key"),
    [
        ("podAnnotation.a=b", "podAnnotation"),
        ("extraArg={--x}", "extraArg"),
        ("rbac.craete=false", "craete"),
        ("metrics.service.typ=x", "typ"),
    ],
)
def test_values_schema_refuses_a_typo(typo: str, key: str) -> None:
    error = refused(typo)
    assert "additional properties" in error and f"'{key}'" in error, error


def test_values_schema_knows_every_value() -> None:
    """Each key of values.yaml is a property of the schema, down to its free-form objects."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    paths = list(value_paths(schema))
    assert len(paths) > 40 and "rbac.aggregateToDefaultRoles" in dict(paths)


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
def test_rendered_rbac_is_least_privilege(mode: str) -> None:
    sets = ["watchNamespaces={team-a,team-b}"] if mode == "namespaced" else []
    docs = render(*sets)
    kinds = sorted(d["kind"] for d in docs)
    node_events = [d for d in docs if d["metadata"]["name"].endswith("-node-events")]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in node_events] == [
        ("Role", "default"),
        ("RoleBinding", "default"),
    ]  # an Event on a Node a job blamed, where Kubernetes keeps a Node's Events
    assert node_events[0]["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    ]
    docs = [d for d in docs if d not in node_events]
    kinds = sorted(d["kind"] for d in docs)
    if mode == "namespaced":
        assert kinds.count("Role") == 2 and kinds.count("RoleBinding") == 2
        roles = [d for d in docs if d["kind"] == "Role"]
        assert {r["metadata"]["namespace"] for r in roles} == {"team-a", "team-b"}
        args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
        assert "--namespace=team-a" in args and "--all-namespaces" not in args
    else:
        assert "Role" not in kinds and len(operator_roles(docs)) == 2
    logs = [set(r["verbs"]) for r in rules_of(docs) if "pods/log" in r["resources"]]
    assert logs == [{"get"}] * len(logs) and logs  # a failed worker's log, read only
    for rule in rules_of(docs):
        resources, verbs = set(rule["resources"]), set(rule["verbs"])
        assert "*" not in resources and "*" not in verbs and "*" not in rule["apiGroups"]
        assert not resources & {"secrets", "pods/exec", "pods/attach"}
        if "configmaps" in resources:  # the jobs' own, watched by label to be restored
            want = {"create", "get", "list", "watch", "patch", "delete"}
            assert resources == {"configmaps"} and verbs == want
        assert "impersonate" not in verbs and "escalate" not in verbs and "bind" not in verbs
        assert "rbac.authorization.k8s.io" not in rule["apiGroups"]
        if "nodes" in resources:
            assert verbs <= {"get", "list", "watch"}


def test_deployment_is_hardened() -> None:
    docs = render()
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    assert deploy["spec"]["strategy"]["type"] == "Recreate" and deploy["spec"]["replicas"] == 1
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"]
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"ddp-operator/operator:{version}"
    assert any(d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics") for d in docs)


def test_network_isolation_is_on_unless_the_values_turn_it_off() -> None:
    def args(*sets: str) -> list[str]:
        deploy = next(d for d in render(*sets) if d["kind"] == "Deployment")
        return deploy["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--no-network-isolation" not in args()
    assert "--no-network-isolation" in args("networkIsolation=false")
    rules = [r for r in rules_of(render()) if "networkpolicies" in r["resources"]]
    assert [set(r["verbs"]) for r in rules] == [{"create", "get", "list", "watch", "patch"}]


def test_standby_uses_kopf_peering_with_priorities() -> None:
    docs = render("standby.enabled=true")
    deploys = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    args = {n: d["spec"]["template"]["spec"]["containers"][0]["args"] for n, d in deploys.items()}
    assert "--priority=100" in args["ddp-ddp-operator"]
    assert "--priority=50" in args["ddp-ddp-operator-standby"]
    assert all("--peering=ddp-ddp-operator" in a for a in args.values())
    assert any(d["kind"] == "ClusterKopfPeering" for d in docs)
    # Two standbys of one priority would pause each other once the active one is gone.
    refused = subprocess.run(
        [
            tool("helm"),
            "template",
            "ddp",
            str(CHART),
            "--set",
            "standby.enabled=true",
            "--set",
            "standby.replicas=2",
        ],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "/standby/replicas" in refused.stderr, refused.stderr


def _sa_kubeconfig(cluster: Cluster, ns: str, sa: str, path: Path) -> Path:
    token = cluster.core.create_namespaced_service_account_token(
        sa, ns, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    cfg = cluster.api.configuration
    ca = Path(cfg.ssl_ca_cert).read_bytes() if cfg.ssl_ca_cert else None
    cluster_entry: dict = {"server": cfg.host}
    if ca:
        cluster_entry["certificate-authority-data"] = base64.b64encode(ca).decode()
    else:
        cluster_entry["insecure-skip-tls-verify"] = True
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "sa",
                "clusters": [{"name": "c", "cluster": cluster_entry}],
                "users": [{"name": sa, "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "c", "user": sa}}],
            }
        )
    )
    return path


@pytest.fixture
def installed(cluster: Cluster, crd: str, namespace: str) -> Iterator[tuple[str, str]]:
    """The chart installed in namespaced mode, watching the test's namespace."""
    release = f"ddp-{uuid.uuid4().hex[:6]}"
    system = f"{release}-system"
    helm(
        cluster,
        "install",
        release,
        str(CHART),
        "--namespace",
        system,
        "--create-namespace",
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--wait=false",
    )
    try:
        yield system, f"{release}-ddp-operator"
    finally:
        helm(cluster, "uninstall", release, "--namespace", system)
        cluster.core.delete_namespace(system, propagation_policy="Background")


@pytest.mark.cluster
def test_service_account_runs_a_job_and_is_denied_the_rest(
    cluster: Cluster, namespace: str, installed: tuple[str, str], tmp_path: Path
) -> None:
    system, sa = installed
    who = f"system:serviceaccount:{system}:{sa}"

    def can_i(*args: str) -> bool:
        r = cluster.kubectl("auth", "can-i", *args, f"--as={who}", check=False)
        return r.stdout.strip() == "yes"

    assert can_i("create", "pods", "-n", namespace)
    assert can_i("patch", "pods", "-n", namespace)  # the mark Kueue ends a group by
    assert can_i("get", "pods", "--subresource=log", "-n", namespace)  # a failed worker's log
    assert can_i("patch", "ddpjobs.ddp-operator.io", "--subresource=status", "-n", namespace)
    assert can_i("create", "podgroups.scheduling.k8s.io", "-n", namespace)  # gang scheduling
    assert can_i("create", "workloads.scheduling.k8s.io", "-n", namespace)

    # Why Kueue holds a group: its Workload. Asked of the authorizer itself: kubectl
    # resolves a resource through discovery, and Kueue's API may not be served here yet.
    def kueue_may(verb: str) -> bool:
        spec = {
            "user": who,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{system}"],
            "resourceAttributes": {
                "verb": verb,
                "group": "kueue.x-k8s.io",
                "resource": "workloads",
                "namespace": namespace,
            },
        }
        review = client.AuthorizationV1Api(cluster.api).create_subject_access_review({"spec": spec})
        return bool(review.status.allowed)

    # Its job-level Workloads (MultiKueue): made, adopted, watched; never updated or deleted.
    assert all(kueue_may(v) for v in ("get", "list", "watch", "create", "patch"))
    assert not kueue_may("update") and not kueue_may("delete")
    for denied in (
        ("get", "secrets", "-n", namespace),
        ("list", "secrets", "-A"),
        ("create", "pods", "-n", "default"),  # outside its namespaces
        ("patch", "nodes"),
        ("delete", "nodes"),
        ("create", "roles.rbac.authorization.k8s.io", "-n", namespace),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
        ("create", "pods", "--subresource=exec", "-n", namespace),
        ("create", "pods", "--subresource=log", "-n", namespace),  # its log: get only
        ("impersonate", "users"),
        ("patch", "ddpjobs.ddp-operator.io", "-n", namespace),  # only its status
        ("delete", "podgroups.scheduling.k8s.io", "-n", namespace),  # GC removes them
    ):
        assert not can_i(*denied), denied

    kubeconfig = _sa_kubeconfig(cluster, system, sa, tmp_path / "sa.kubeconfig")
    as_sa = Cluster(kubeconfig, cluster.local, False, cluster.api)
    op = OperatorProcess(as_sa, namespace).start()
    try:
        op.wait_ready()
        jobs.apply(cluster, ddpjob("rbac", namespace, nodes=2, backoffLimit=1))
        wait_running(cluster, namespace, "rbac", 2)
        pods.finish(cluster, namespace, "rbac-worker-1", 5)  # a group restart
        for w in wait_running(cluster, namespace, "rbac", 2, attempt=1):
            pods.finish(cluster, namespace, w["metadata"]["name"], 0)
        job = jobs.wait_condition(cluster, namespace, "rbac", "Succeeded")
        assert job["status"]["restarts"] == 1
        wait_for(
            lambda: any(
                e["reason"] == "AllWorkersSucceeded"
                for e in jobs.events(cluster, namespace, "rbac")
            ),
            timeout=30,
            what="the Succeeded event (events are allowed)",
        )
    finally:
        op.stop()
    assert not denials(op.output()), op.output()


def denials(log: str) -> list[str]:
    """The lines of an operator's log that say the API server denied it something: its every
    403 says Forbidden (the status's reason; its message: "... is forbidden: User ..."), however
    the log renders it. Not the bare number: a line stamped 23:31:16,403 holds it too."""
    return [line for line in log.splitlines() if "forbidden" in line.lower()]


def test_a_denial_is_found_by_its_words_not_by_a_number_a_timestamp_holds() -> None:
    """Issue 68: ``"403" not in log`` failed a run on a line stamped 23:31:16,403."""
    stamped = "[2026-11-29 23:31:16,403] kopf.objects [INFO] [ns/rbac] AllWorkersSucceeded"
    assert denials(stamped) == []
    for denied in (
        'pods "rbac-worker-0" is forbidden: User "system:serviceaccount:s:ddp" cannot delete',
        "(403)\nReason: Forbidden\nHTTP response headers: ...",
        "kopf._cogs.clients.errors.APIForbiddenError: ('pods is forbidden', ...)",
    ):
        assert denials(f"{stamped}\n{denied}\n{stamped}"), denied


@pytest.mark.cluster
def test_pods_it_may_not_list_block_the_job_saying_why_until_it_may(
    cluster: Cluster, namespace: str, installed: tuple[str, str], tmp_path: Path
) -> None:
    """The operator's Role loses list and watch on pods (an admin's mistake): the job says so
    (Blocked, the API's message, an Event), creates nothing, and goes on once the Role is
    mended."""
    system, sa = installed
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    plain = cluster.api.sanitize_for_serialization
    whole = plain(rbac.read_namespaced_role(sa, namespace).rules)
    cut = [
        {**r, "verbs": [v for v in r["verbs"] if v not in ("list", "watch")]}
        if r["resources"] == ["pods"]
        else r
        for r in whole
    ]
    binding = rbac.read_namespaced_role_binding(sa, namespace)
    # The chart's Role and RoleBinding, copied to a namespace of the test's own: the session's
    # operator (the tests' namespaces) and the chart's (`namespace`) do not watch it.
    ns = f"unseen-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(fake_nodes_namespace(ns))
    op = None
    try:
        rbac.create_namespaced_role(ns, {"metadata": {"name": sa}, "rules": cut})
        rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": sa},
                "roleRef": plain(binding.role_ref),
                "subjects": plain(binding.subjects),
            },
        )
        wait_for(lambda: cluster.core.list_namespaced_service_account(ns).items, what="its SA")
        kubeconfig = _sa_kubeconfig(cluster, system, sa, tmp_path / "sa.kubeconfig")
        op = OperatorProcess(Cluster(kubeconfig, cluster.local, False, cluster.api), ns).start()
        op.wait_ready()
        jobs.apply(cluster, ddpjob("unseen", ns, nodes=2))
        job = jobs.wait_condition(cluster, ns, "unseen", "Blocked")
        blocked = jobs.condition(job, "Blocked")
        assert blocked["reason"] == "Forbidden", blocked
        assert blocked["message"].startswith(f"listing the pods in namespace {ns}: "), blocked
        assert "cannot list resource" in blocked["message"], blocked
        wait_for(
            lambda: any(e["reason"] == "Forbidden" for e in jobs.events(cluster, ns, "unseen")),
            timeout=30,
            what="the Forbidden event",
        )
        time.sleep(2)  # passes that would create pods have had time to
        assert jobs.workers(cluster, ns, "unseen") == []  # nothing done for a job unseen
        rbac.patch_namespaced_role(sa, ns, {"rules": whole})
        wait_running(cluster, ns, "unseen", 2)
        jobs.wait_condition(cluster, ns, "unseen", "Blocked", "False")
    finally:
        if op is not None:
            op.stop()
        cluster.core.delete_namespace(ns, propagation_policy="Background")


def test_progress_is_served_by_default_behind_a_service_of_the_ready_replica() -> None:
    """The Service selects both replicas; a paused standby is not ready (``/readyz``)."""
    docs = render()
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--progress-address=0.0.0.0:8090" in args
    assert "--progress-url=http://ddp-ddp-operator-progress.ddp-system.svc:8090" in args
    svc = next(d for d in docs if d["metadata"]["name"] == "ddp-ddp-operator-progress")
    assert "ddp-operator.io/role" not in svc["spec"]["selector"]
    standby = render("standby.enabled=true")
    for deploy in (d for d in standby if d["kind"] == "Deployment"):
        probe = deploy["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
        assert probe["httpGet"] == {"path": "/readyz", "port": "progress"}
    assert svc["spec"]["ports"][0]["targetPort"] == "progress"
    reviews = [r for r in rules_of(docs) if "tokenreviews" in r["resources"]]
    assert [(r["apiGroups"], r["verbs"]) for r in reviews] == [
        (["authentication.k8s.io"], ["create"])
    ]
    off = render("progress.enabled=false")
    assert not any("progress" in d["metadata"]["name"] for d in off)
    assert not any("tokenreviews" in r["resources"] for r in rules_of(off))


def test_service_monitor_and_dashboard_are_off_by_default_and_render_when_asked() -> None:
    kinds = {d["kind"] for d in render()}
    assert "ServiceMonitor" not in kinds and "ConfigMap" not in kinds
    docs = render(
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=kps",
        "metrics.dashboard.enabled=true",
    )
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    metrics_svc = next(d for d in docs if d["metadata"]["name"].endswith("-metrics"))
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= metrics_svc["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    board = next(d for d in docs if d["kind"] == "ConfigMap")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (CHART / "dashboards" / "ddp-operator.json").read_text()
    assert json.loads(board["data"]["ddp-operator.json"]) == json.loads(shipped)


def test_multikueue_rbac_for_kueue_is_off_by_default_and_bound_to_kueue_when_asked() -> None:
    assert not [d for d in render() if d["metadata"]["name"].endswith("-multikueue")]
    docs = render("kueue.multiKueue.enabled=true")
    role = next(
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-multikueue")
    )
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in role["rules"]}
    assert rules[("ddpjobs",)] >= {"get", "list", "watch", "create", "delete", "patch"}
    assert rules[("ddpjobs/status",)] >= {"patch", "update"}
    binding = next(
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("-multikueue")
    )
    (subject,) = binding["subjects"]
    assert (subject["name"], subject["namespace"]) == ("kueue-controller-manager", "kueue-system")


def test_a_network_policy_admits_only_workers_to_the_progress_port() -> None:
    """By default only pods with the worker label (in the watched namespaces) reach the progress
    port; liveness and metrics stay open to all; trusted sources reach the operator's flag."""
    docs = render("watchNamespaces={team-a}")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    progress, others = policy["spec"]["ingress"]
    assert progress["ports"] == [{"port": "progress", "protocol": "TCP"}]
    (peer,) = progress["from"]
    assert peer["podSelector"]["matchExpressions"] == [
        {"key": "ddp-operator.io/job-name", "operator": "Exists"}
    ]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-a"]
    assert "from" not in others and [p["port"] for p in others["ports"]] == ["healthz", "metrics"]
    assert (
        next(d for d in render() if d["kind"] == "NetworkPolicy")["spec"]["ingress"][0]["from"][0][
            "namespaceSelector"
        ]
        == {}
    )
    assert not [
        d for d in render("progress.networkPolicy.enabled=false") if d["kind"] == "NetworkPolicy"
    ]
    args = next(
        d for d in render("progress.trustedSources={10.0.0.0/8}") if d["kind"] == "Deployment"
    )["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--progress-trusted-sources=10.0.0.0/8" in args


def value_paths(schema: dict) -> Iterator[tuple[str, object]]:
    """(key path, default) of every value of values.yaml: a leaf, or an object the schema leaves
    free-form (a Kubernetes object such as ``resources``); each key checked against the
    schema's properties on the way."""

    def walk(value: object, node: dict, path: str) -> Iterator[tuple[str, object]]:
        props = node.get("properties")
        if isinstance(value, dict) and props:
            for key, inner in value.items():
                at = f"{path}.{key}" if path else key
                assert key in props, f"{at} is not in values.schema.json"
                yield from walk(inner, props[key], at)
        else:
            yield path, value

    yield from walk(yaml.safe_load((CHART / "values.yaml").read_text()), schema, "")


def test_standby_keeps_the_pod_annotations_and_labels() -> None:
    docs = render("standby.enabled=true", "podAnnotations.team=ml", "podLabels.tier=ops")
    for name, deploy in deployments(docs).items():
        meta = deploy["spec"]["template"]["metadata"]
        assert meta["annotations"] == {"team": "ml"}, name
        assert meta["labels"]["tier"] == "ops", name
    assert set(deployments(docs)) == {"ddp-ddp-operator", "ddp-ddp-operator-standby"}


def _selects(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


def test_metrics_service_selects_the_active_replica_only() -> None:
    """A standby's metrics (no jobs, counters of its own) must not be scraped beside the
    active replica's; the progress Service selects both, and a paused standby is not ready."""
    docs = render("standby.enabled=true")
    pods = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in deployments(docs).items()}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    metrics = services["ddp-ddp-operator-metrics"]["spec"]["selector"]
    assert _selects(metrics, pods["ddp-ddp-operator"])
    assert not _selects(metrics, pods["ddp-ddp-operator-standby"])
    progress = services["ddp-ddp-operator-progress"]["spec"]["selector"]
    assert all(_selects(progress, labels) for labels in pods.values())
    # Each Deployment's selector (immutable) matches its own pods only.
    for name, deploy in deployments(docs).items():
        own = deploy["spec"]["selector"]["matchLabels"]
        assert [n for n, labels in pods.items() if _selects(own, labels)] == [name]
    # The NetworkPolicy in front of the operator covers both replicas.
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")["spec"]["podSelector"]
    assert all(_selects(policy["matchLabels"], labels) for labels in pods.values())


HARDENED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
HARDENED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def _security(docs: list[dict]) -> list[tuple[dict, dict]]:
    return [
        (
            d["spec"]["template"]["spec"]["securityContext"],
            d["spec"]["template"]["spec"]["containers"][0]["securityContext"],
        )
        for d in deployments(docs).values()
    ]


def test_security_contexts_default_to_the_hardened_ones_and_can_be_overridden(
    tmp_path: Path,
) -> None:
    assert _security(render("standby.enabled=true")) == [(HARDENED_POD, HARDENED_CONTAINER)] * 2
    # OpenShift: its SCC assigns the UID; null drops a default key, the rest stays.
    openshift = render(
        "standby.enabled=true",
        "podSecurityContext.runAsUser=null",
        "podSecurityContext.runAsGroup=null",
    )
    rest = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert _security(openshift) == [(rest, HARDENED_CONTAINER)] * 2
    values = tmp_path / "values.yaml"
    values.write_text(
        "podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: 2000}\n"
        "securityContext: {readOnlyRootFilesystem: false}\n"
    )
    ((pod, container),) = _security(render(values=values))
    assert pod == {**rest, "fsGroup": 2000}
    assert container == {**HARDENED_CONTAINER, "readOnlyRootFilesystem": False}


def test_rbac_create_false_renders_no_rbac_at_all() -> None:
    everything = ("standby.enabled=true", "kueue.multiKueue.enabled=true")
    for mode, kinds in (
        ([], {"ClusterRole", "ClusterRoleBinding"}),
        (["watchNamespaces={a}"], RBAC_KINDS),
    ):
        assert {d["kind"] for d in render(*everything, *mode)} >= kinds
        docs = render("rbac.create=false", *everything, *mode)
        assert not [d["kind"] for d in docs if d["kind"] in RBAC_KINDS]
        assert {"Deployment", "ServiceAccount"} <= {d["kind"] for d in docs}


def test_extra_args_are_appended_to_the_operators_run_arguments() -> None:
    docs = render("standby.enabled=true", "extraArgs={--peering-lifetime=30,--log-format=plain}")
    for name, deploy in deployments(docs).items():
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[0] == "run" and args[-2:] == ["--peering-lifetime=30", "--log-format=plain"]
        assert args.index("--log-format=json") < args.index("--log-format=plain"), name
    plain = next(iter(deployments(render()).values()))["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in plain["args"] if "peering-lifetime" in a]


def test_users_roles_aggregate_into_the_built_in_ones_and_grant_ddpjobs_only() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    docs = render()
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    edit, view = roles["ddp-ddp-operator-edit"], roles["ddp-ddp-operator-view"]
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    labels = {k: v for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregate)}
    assert labels == {f"{aggregate}admin": "true", f"{aggregate}edit": "true"}
    labels = {k: v for k, v in view["metadata"]["labels"].items() if k.startswith(aggregate)}
    assert labels == {f"{aggregate}view": "true"}

    def grants(role: dict) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for rule in role["rules"]:
            assert rule["apiGroups"] == [group], rule
            for resource in rule["resources"]:
                out.setdefault(resource, set()).update(rule["verbs"])
        return out

    read = {"get", "list", "watch"}
    writes = {"create", "update", "patch", "delete"}
    assert grants(edit) == {plural: read | writes, f"{plural}/status": read}
    assert grants(view) == {plural: read, f"{plural}/status": read}
    # Not bound by the chart: a namespace's RoleBinding of edit, admin or view grants them.
    bound = {d["roleRef"]["name"] for d in docs if d["kind"].endswith("Binding")}
    assert not bound & {"ddp-ddp-operator-edit", "ddp-ddp-operator-view"}
    off = render("rbac.aggregateToDefaultRoles=false")
    assert not [d for d in off if d["metadata"]["name"].endswith(("-edit", "-view"))]
    assert len(operator_roles(off)) == 3  # <release>, <release>-cluster, <release>-node-events


README = CHART / "README.md"
TABLE_ROW = re.compile(r"^\| `([^`]+)` \| `(.*)` \| .+ \|$")


def test_readme_lists_every_value_with_its_default() -> None:
    """The chart README's table of values: every value of values.yaml, none more, each with
    the default values.yaml gives it."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = dict(value_paths(schema))
    rows = [TABLE_ROW.match(line) for line in README.read_text().splitlines()]
    table = {m[1]: yaml.safe_load(m[2]) for m in rows if m}
    assert sorted(table) == sorted(values), set(table) ^ set(values)
    wrong = {k: (table[k], values[k]) for k in values if table[k] != values[k]}
    assert not wrong, wrong


RBAC_PAGE = ROOT / "docs" / "operations" / "rbac.md"


def _page_rules() -> dict[tuple[str, str, str], set[str]]:
    """(API group, resource, where) -> verbs from the operator's table on the RBAC page."""
    lines = RBAC_PAGE.read_text().splitlines()
    start = lines.index("| resources | API group | verbs | where | why |")
    out = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        resources, groups, verbs, where = (c.strip() for c in line.strip("|").split(" | ")[:4])
        names = re.findall(r"`([^`]+)`", groups) or ([""] if groups == "core" else [groups])
        for group in names:
            for resource in re.findall(r"`([^`]+)`", resources):
                assert (group, resource, where) not in out, (group, resource, where)
                out[(group, resource, where)] = {v.strip() for v in verbs.split(",")}
    return out


def _where(role: dict) -> str:
    """Where a role of the operator's grants, as the RBAC page says it."""
    name = role["metadata"]["name"]
    if name.endswith("-cluster"):
        return "cluster"
    return "`default`" if name.endswith("-node-events") else "jobs' namespaces"


def test_rbac_page_lists_exactly_the_rendered_rules() -> None:
    docs = render("standby.enabled=true")  # every optional rule (progress is on by default)
    rendered: dict[tuple[str, str, str], set[str]] = {}
    for role in operator_roles(docs):
        where = _where(role)
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert (group, resource, where) not in rendered, (group, resource)
                    rendered[(group, resource, where)] = set(rule["verbs"])
    assert _page_rules() == rendered
    # The namespaced mode's Roles hold the same rules as the all-namespaces ClusterRole.
    namespaced = render("standby.enabled=true", "watchNamespaces={team-a}")
    (role,) = [d for d in namespaced if d["kind"] == "Role" and _where(d) != "`default`"]
    (cluster_role,) = [
        d
        for d in docs
        if d["metadata"]["name"] == "ddp-ddp-operator" and d["kind"] == "ClusterRole"
    ]
    assert role["rules"] == cluster_role["rules"]


def notes(*sets: str, tmp_path: Path) -> str:
    """NOTES.txt as Helm renders it after an install (helm template leaves it out: here it is
    rendered through tpl in a copy of the chart)."""
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    (copy / "templates" / "NOTES.txt").rename(copy / "NOTES.src")
    (copy / "templates" / "notes.yaml").write_text(
        'notes: |\n{{ tpl (.Files.Get "NOTES.src") . | indent 2 }}\n'
    )
    args = ["template", "ddp", str(copy), "-n", "ddp-system", "--show-only", "templates/notes.yaml"]
    return yaml.safe_load(helm(None, *args, *_sets(sets)).stdout)["notes"]


def test_notes_say_where_kubectl_ddp_comes_from_and_the_crd_goes_first(tmp_path: Path) -> None:
    text = notes(tmp_path=tmp_path)
    assert "pip install ddp-operator" not in text
    assert "`pip install ./` puts kubectl-ddp on the PATH" in " ".join(text.split())
    crd = text.index("kubectl apply --server-side --force-conflicts -f charts/ddp-operator/crds/")
    assert crd < text.index("helm upgrade ddp charts/ddp-operator -n ddp-system")
    assert "ddp-ddp-operator-edit" in text and "rbac.create=false" not in text
    manual = notes("rbac.create=false", tmp_path=tmp_path / "off")
    assert "ddp-ddp-operator-edit" not in manual
    assert "ddp-system/ddp-ddp-operator to the rules" in manual


def test_bad_nodes_are_read_by_default_and_tainted_only_when_asked() -> None:
    def node_rules(*sets: str) -> list[set[str]]:
        return [set(r["verbs"]) for r in rules_of(render(*sets)) if "nodes" in r["resources"]]

    def args(*sets: str) -> list[str]:
        deploy = next(d for d in render(*sets) if d["kind"] == "Deployment")
        return deploy["spec"]["template"]["spec"]["containers"][0]["args"]

    assert node_rules() == [{"list"}]
    assert not [a for a in args() if a.startswith(("--broken-node-marker", "--taint"))]
    assert node_rules("badNodes.markers={none}") == []
    assert "--broken-node-marker=none" in args("badNodes.markers={none}")
    marked = args("badNodes.markers={taint:nvidia.com/gpu-xid-error}")
    assert "--broken-node-marker=taint:nvidia.com/gpu-xid-error" in marked
    assert node_rules("badNodes.taint.enabled=true") == [{"list", "get", "patch"}]
    assert "--taint-blamed-nodes=0.05" in args("badNodes.taint.enabled=true")
    assert "badNodes" in refused("badNodes.markers={bogus}")
