"""The CRD file itself: well-formed, and declaring everything the operator writes."""

from __future__ import annotations

from datetime import UTC, datetime

import yaml

from ddp_operator.decide.reconcile import plan
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve
from ddp_operator.model.workers import WorkerPod

from harness.cluster import CRD_FILE
from jobs import ddpjob


class StrictLoader(yaml.SafeLoader):
    """A loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _no_duplicates(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    assert not dupes, f"duplicate keys {dupes} at line {node.start_mark.line + 1}"
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def crd() -> dict:
    return yaml.load(CRD_FILE.read_text(), Loader=StrictLoader)


def test_names_and_printer_columns() -> None:
    doc = crd()
    names = doc["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (c.KIND, c.PLURAL, ["ddpj"])
    version = doc["spec"]["versions"][0]
    assert version["name"] == c.VERSION and version["subresources"] == {"status": {}}
    columns = [col["name"] for col in version["additionalPrinterColumns"]]
    assert columns[:5] == ["Phase", "Nodes", "Running", "Restarts", "Age"]


def test_every_status_field_the_operator_writes_is_declared() -> None:
    """Undeclared status fields would be pruned by the API server."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    job = resolve(ddpjob("j", nodes=1))
    status = plan(
        job, {}, [WorkerPod("j-worker-0", 0, 0, "Running", owner_uid="")], datetime.now(UTC)
    ).status
    assert set(status) <= set(schema["properties"])
    assert set(status["workers"]) <= set(schema["properties"]["workers"]["properties"])
    cond_fields = set(schema["properties"]["conditions"]["items"]["properties"])
    for cond in status["conditions"]:
        assert set(cond) <= cond_fields
