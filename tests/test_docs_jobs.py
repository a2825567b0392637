"""The DDPJob page (docs/concepts/jobs.md) cannot fall behind the CRD and the operator: every
top-level spec field, every status field, every printer column of the CRD and every condition
type the operator sets has a row on it, and no row names a field the CRD lacks. The Kueue task
page's queue objects (examples/kueue/queues.yaml) are the ones its DDPJob names."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "operator" / "ddp_operator"
CRD = ROOT / "crds" / "ddpjobs.ddp-operator.io.yaml"
JOBS_PAGE = ROOT / "docs" / "concepts" / "jobs.md"
KUEUE_PAGE = ROOT / "docs" / "tasks" / "kueue.md"
QUEUES = ROOT / "examples" / "kueue" / "queues.yaml"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def section(text: str, heading: str) -> str:
    """The part of a Markdown page under ``## heading``, up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section '## {heading}'"
    return match.group(1)


def row_names(text: str) -> list[str]:
    """The code spans (`name`) in the first cell of each row of the tables in ``text``, less
    the header rows (a row followed by a |---| line)."""
    lines = text.splitlines()
    names: list[str] = []
    for i, line in enumerate(lines):
        if not line.startswith("|") or re.match(r"^\|[-|: ]+\|$", line):
            continue
        if i + 1 < len(lines) and re.match(r"^\|[-|: ]+\|$", lines[i + 1]):
            continue  # a header
        first = line.split("|")[1]
        names += re.findall(r"`([^`]+)`", first)
    return names


def crd_version() -> dict[str, Any]:
    return yaml.safe_load(CRD.read_text())["spec"]["versions"][0]


def crd_fields(part: str) -> set[str]:
    """The top-level fields of the CRD's ``spec`` or ``status``."""
    schema = crd_version()["schema"]["openAPIV3Schema"]["properties"][part]
    return set(schema["properties"])


def condition_types() -> dict[str, str]:
    """Every condition type the operator sets (type: module): each ``COND_*`` string constant
    of the package, and any literal type passed to ``conds.set`` or ``conds.clear``."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("COND_"):
                        found.setdefault(node.value.value, path.name)
            is_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if is_call and node.func.attr in ("set", "clear") and node.args:
                receiver = ast.unparse(node.func.value)
                first = node.args[0]
                if receiver.endswith("conds") and isinstance(first, ast.Constant):
                    found.setdefault(first.value, path.name)
    return found


def missing_fields(page: str, part: str) -> tuple[list[str], list[str]]:
    """The CRD's top-level ``part`` fields (spec or status) without a row in the page's table,
    and the rows that name no such field."""
    rows = set(row_names(section(page, part.capitalize())))
    fields = crd_fields(part)
    return sorted(fields - rows), sorted(rows - fields)


def missing_conditions(page: str) -> dict[str, str]:
    """The condition types the operator sets without a row on the page (type: module)."""
    rows = set(row_names(section(page, "Conditions")))
    return {t: module for t, module in condition_types().items() if t not in rows}


def missing_columns(page: str) -> list[str]:
    """The CRD's printer columns (as kubectl heads them) without a row on the page."""
    rows = set(row_names(section(page, "`kubectl get ddpj`")))
    columns = {c["name"].upper() for c in crd_version()["additionalPrinterColumns"]}
    return sorted(columns - rows)


@pytest.mark.parametrize("part", ["spec", "status"])
def test_every_field_of_the_crd_has_a_row_on_the_jobs_page(part: str) -> None:
    assert len(crd_fields(part)) > 15
    missing, stale = missing_fields(JOBS_PAGE.read_text(), part)
    assert not missing, f"{part} fields missing from {JOBS_PAGE.name}'s table: {missing}"
    assert not stale, f"{JOBS_PAGE.name}'s {part} table names fields the CRD lacks: {stale}"


def test_every_condition_the_operator_sets_has_a_row_on_the_jobs_page() -> None:
    types = condition_types()
    assert {"Created", "Blocked", "InPlaceRestart", "OwnedObjects", "Isolated"} <= types.keys()
    missing = missing_conditions(JOBS_PAGE.read_text())
    assert not missing, f"conditions missing from {JOBS_PAGE.name} (type: module): {missing}"


def test_every_column_of_kubectl_get_has_a_row_on_the_jobs_page() -> None:
    columns = {c["name"].upper() for c in crd_version()["additionalPrinterColumns"]}
    assert {"PHASE", "PROGRESS", "ETA"} <= columns
    missing = missing_columns(JOBS_PAGE.read_text())
    assert not missing, f"columns of kubectl get ddpj missing from {JOBS_PAGE.name}: {missing}"


def test_a_row_dropped_from_the_page_is_missed() -> None:
    """The checks can fail: the page less one row of each table misses exactly that row."""
    page = JOBS_PAGE.read_text()

    def drop(row: str) -> str:
        kept = [x for x in page.splitlines() if not x.startswith(f"| `{row}` |")]
        assert len(kept) == len(page.splitlines()) - 1, row
        return "\n".join(kept)

    assert missing_fields(drop("stallDetection"), "spec") == (["stallDetection"], [])
    assert missing_fields(drop("progress"), "status") == (["progress"], [])
    assert missing_conditions(drop("Isolated")) == {"Isolated": "owned.py"}
    assert missing_columns(drop("ETA")) == ["ETA"]


def test_the_kueue_page_queues_its_job_in_the_example_queues() -> None:
    """examples/kueue/queues.yaml parses as a ResourceFlavor, a ClusterQueue of that flavor with
    GPU quota, and a LocalQueue of that ClusterQueue; the Kueue page's DDPJob names the
    LocalQueue, and asks for a resource the ClusterQueue covers."""
    docs = {d["kind"]: d for d in yaml.safe_load_all(QUEUES.read_text())}
    assert set(docs) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta2" for d in docs.values())
    flavor = docs["ResourceFlavor"]["metadata"]["name"]
    cluster_queue = docs["ClusterQueue"]
    groups = cluster_queue["spec"]["resourceGroups"]
    covered = {r for g in groups for r in g["coveredResources"]}
    assert {"cpu", "memory", "nvidia.com/gpu"} <= covered  # the operator's containers ask cpu
    flavors = {f["name"] for g in groups for f in g["flavors"]}
    assert flavors == {flavor}
    local = docs["LocalQueue"]
    assert local["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"]
    assert "namespace" not in local["metadata"]  # applied to the job's namespace (-n)

    blocks = re.findall(r"^```yaml\n(.*?)^```$", KUEUE_PAGE.read_text(), re.M | re.S)
    jobs = [d for b in blocks for d in yaml.safe_load_all(b) if d and d.get("kind") == "DDPJob"]
    assert jobs, f"{KUEUE_PAGE.name} shows no DDPJob"
    for job in jobs:
        assert job["metadata"]["labels"][QUEUE_LABEL] == local["metadata"]["name"]
        assert job["spec"]["accelerator"]["resource"] in covered
