"""The documentation: the site builds strictly, the API reference is the CRD's, every condition
reason the operator can set is on the troubleshooting page, and the README stays short."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "operator" / "ddp_operator"
TROUBLESHOOTING = ROOT / "docs" / "operations" / "troubleshooting.md"

# Capitalised words in the operator's code that are not reasons it sets: Kubernetes kinds,
# field values of the API (ours and Kubernetes'), HTTP and Event vocabulary.
# fmt: off
NOT_REASONS = {
    # field values, ours and Kubernetes'
    "AllWorkers", "Worker0", "InPlace", "Fail", "Kubernetes", "Coscheduling", "Volcano", "All",
    "None", "Never", "Memory", "In", "NoExecute", "IfNotPresent", "OnFailure", "RuntimeDefault",
    "NoSchedule",
    "FallbackToLogsOnError", "RestartAllContainers", "PodScheduled", "Terminating", "Exists",
    "Background", "NotIn",
    # pod condition types every pod has, which the operator ignores
    "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers",
    # the kubelet's words for a container it cannot start (read, never set)
    "StartError", "RunContainerError",
    # kinds, and the vocabulary of Events, conditions and HTTP
    "DDPJob", "Service", "Pod", "PodGroup", "Workload", "NetworkPolicy", "ConfigMap", "Ingress",
    "Status", "Node", "Event",
    "Warning", "Normal", "True", "False", "BearerToken", "Accept", "TokenReview", "Authorization",
    # the SDK's names and its local jobs' last phase
    "Client", "LocalClient", "SDKError", "JobFailed", "Deleted",
    # torchrun's words, read in termination messages
    "Signal", "ChildFailedError",
}
# fmt: on
WORD = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$|^[A-Z][a-z]+$")


def _capitalised_literals() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_text and WORD.match(node.value):
                found.setdefault(node.value, path.name)
    return found


def test_every_reason_the_operator_sets_is_on_the_troubleshooting_page():
    page = TROUBLESHOOTING.read_text()
    documented = set(re.findall(r"`([A-Za-z0-9]+)`", page))
    literals = _capitalised_literals()
    assert {"NameConflict", "BackoffLimitExceeded", "WaitingForGang"} <= literals.keys()
    missing = {
        word: module
        for word, module in literals.items()
        if word not in documented and word not in NOT_REASONS
    }
    assert not missing, f"reasons missing from {TROUBLESHOOTING.name} (word: module): {missing}"


def test_the_api_reference_is_generated_from_the_crd_and_every_field_is_described():
    run = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "api_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


def test_a_crd_field_without_a_description_fails_the_reference(tmp_path):
    sys.path.insert(0, str(ROOT / "hack"))
    try:
        import api_reference
    finally:
        sys.path.pop(0)
    crd = {
        "spec": {
            "group": "g",
            "names": {"kind": "K"},
            "versions": [
                {
                    "name": "v1",
                    "schema": {
                        "openAPIV3Schema": {
                            "properties": {
                                "spec": {"properties": {"a": {"type": "string"}}},
                                "status": {"properties": {}},
                            }
                        }
                    },
                }
            ],
        }
    }
    page, missing = api_reference.render(crd)
    assert missing == ["spec.a"] and "| `spec.a` | string |" in page


def test_the_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.fail("mkdocs is not installed in this environment (pyproject.toml's test extra)")
    run = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "site" / "operations" / "troubleshooting" / "index.html").exists()


def test_an_example_shown_on_a_page_is_the_file_itself():
    """A page's yaml block that names an example (its `examples/...yaml` path in the paragraph
    before it) is that file, byte for byte: a changed example never leaves a stale copy."""
    shown = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text()
        for match in re.finditer(r"^```yaml\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
            before = text[: match.start()].rsplit("\n\n", 2)[-2:]
            named = re.findall(r"`(examples/[\w/.-]+\.yaml)`", "\n\n".join(before))
            if named:
                shown += 1
                path = page.relative_to(ROOT)
                assert match.group(1) == (ROOT / named[-1]).read_text(), f"{path}: {named[-1]}"
    assert shown >= 1  # docs/tasks/elastic.md shows examples/launchers/torchrun-elastic.yaml


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_package_the_chart_and_the_changelog_share_one_version():
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "ddp-operator" / "Chart.yaml").read_text())
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest and package == chart["version"] == chart["appVersion"] == newest.group(1)
    # The helpers' distribution (Lightning's entry points), and the release the install page
    # builds, checks out and installs.
    (helpers,) = (ROOT / "helpers").glob("ddp_operator_helpers-*.dist-info")
    assert helpers.name == f"ddp_operator_helpers-{package}.dist-info"
    install = (ROOT / "docs" / "getting-started" / "your-cluster.md").read_text()
    named = re.findall(
        r"(?:ddp-(?:operator|trainer):|--version |checkout v)(\d+\.\d+\.\d+)", install
    )
    assert named and set(named) == {package}, named
