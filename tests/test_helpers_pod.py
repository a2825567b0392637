"""What a worker pod gets so that the operator's helpers run in any image
(``manifests.helpers_pod``): the volume, the copy or the image volume, the trainer's
``PYTHONPATH`` with the template's entries kept, the in-place watch on the operator's image."""

from __future__ import annotations

from typing import Any

import pytest

from ddp_operator.manifests import builders, helpers_pod
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob

OPERATOR_IMAGE = "registry.example/ddp-operator/operator:0.2.0"


def worker(env: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    job = ddpjob("j", "team-a", nodes=2, **spec)
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    if env is not None:
        trainer["env"] = env
    return builders.build_worker_pod(
        resolve(job), 1, in_place=job["spec"].get("restartStrategy") != "Recreate"
    )


def env_of(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod["spec"]["containers"][0]["env"]


def test_an_init_container_copies_the_helpers_which_the_trainer_reads_first_on_its_path() -> None:
    pod = helpers_pod.add_helpers(worker(), helpers_pod.Delivery(OPERATOR_IMAGE))
    (copy,) = pod["spec"]["initContainers"]
    assert copy["image"] == OPERATOR_IMAGE
    assert copy["command"] == ["cp", "-R", "/opt/ddp-operator/helpers/.", "/ddp-helpers/"]
    assert (
        copy["securityContext"]["runAsNonRoot"]
        and copy["securityContext"]["readOnlyRootFilesystem"]
    )
    assert copy["resources"]["requests"] == copy["resources"]["limits"]  # Guaranteed stays so
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "ddp-helpers")
    assert "emptyDir" in volume
    trainer = pod["spec"]["containers"][0]
    mount = next(m for m in trainer["volumeMounts"] if m["name"] == "ddp-helpers")
    assert mount == {"name": "ddp-helpers", "mountPath": "/ddp-operator/helpers", "readOnly": True}
    assert {"name": "PYTHONPATH", "value": "/ddp-operator/helpers"} in trainer["env"]
    assert helpers_pod.delivered(pod)


def test_an_image_volume_mounts_the_operator_image_s_helpers_with_no_copy() -> None:
    pod = helpers_pod.add_helpers(worker(), helpers_pod.Delivery(OPERATOR_IMAGE, "ImageVolume"))
    assert "initContainers" not in pod["spec"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "ddp-helpers")
    assert volume["image"] == {"reference": OPERATOR_IMAGE, "pullPolicy": "IfNotPresent"}
    mount = next(
        m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "ddp-helpers"
    )
    assert mount["subPath"] == "opt/ddp-operator/helpers" and mount["readOnly"]


def test_the_template_s_pythonpath_comes_after_the_helpers_in_each_of_its_forms() -> None:
    delivery = helpers_pod.Delivery(OPERATOR_IMAGE)
    plain = helpers_pod.add_helpers(
        worker([{"name": "A", "value": "1"}, {"name": "PYTHONPATH", "value": "/app:$(A)"}]),
        delivery,
    )
    paths = [e for e in env_of(plain) if e["name"] == "PYTHONPATH"]
    assert paths == [{"name": "PYTHONPATH", "value": "/ddp-operator/helpers:/app:$(A)"}]

    ref = {"configMapKeyRef": {"name": "paths", "key": "python"}}
    given = helpers_pod.add_helpers(worker([{"name": "PYTHONPATH", "valueFrom": ref}]), delivery)
    names = [e["name"] for e in env_of(given)]
    at = names.index("DDP_TEMPLATE_PYTHONPATH")
    assert env_of(given)[at]["valueFrom"] == ref
    assert env_of(given)[names.index("PYTHONPATH")] == {
        "name": "PYTHONPATH",
        "value": "/ddp-operator/helpers:$(DDP_TEMPLATE_PYTHONPATH)",
    }
    assert names.index("PYTHONPATH") > at  # the kubelet expands only what came before

    job = ddpjob("j", "team-a", nodes=2)
    job["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "settings"}}
    ]
    from_ = helpers_pod.add_helpers(builders.build_worker_pod(resolve(job), 0), delivery)
    value = next(e["value"] for e in env_of(from_) if e["name"] == "PYTHONPATH")
    assert value == "/ddp-operator/helpers:$(PYTHONPATH)"


def test_the_in_place_watch_runs_from_the_operator_s_image_so_the_trainer_s_needs_no_shell() -> (
    None
):
    pod = helpers_pod.add_helpers(
        worker(), helpers_pod.Delivery(OPERATOR_IMAGE, pull_policy="Always")
    )
    watch = next(c for c in pod["spec"]["containers"] if c["name"] == "ddp-attempt-watch")
    assert watch["image"] == OPERATOR_IMAGE and watch["imagePullPolicy"] == "Always"
    assert watch["command"][0] == "/bin/sh"
    assert pod["spec"]["containers"][0]["image"] == "python:3.11-slim"  # the trainer's own


def test_a_job_can_turn_the_helpers_off_and_a_bad_delivery_is_refused() -> None:
    assert resolve(ddpjob("j", helpers={"enabled": False})).helpers is False
    assert resolve(ddpjob("j")).helpers is True
    with pytest.raises(ValueError, match="InitContainer, ImageVolume"):
        helpers_pod.Delivery(OPERATOR_IMAGE, "HostPath")


def test_the_operator_image_holds_the_helpers_the_delivery_names() -> None:
    """The Dockerfile copies helpers/ and exactly MODULES to HELPERS_SOURCE."""
    from harness.cluster import ROOT

    lines = [x for x in (ROOT / "Dockerfile").read_text().splitlines() if x.startswith("COPY")]
    assert f"COPY helpers/ {helpers_pod.HELPERS_SOURCE}/" in lines
    modules = next(x for x in lines if x.endswith(f"{helpers_pod.HELPERS_SOURCE}/ddp_operator/"))
    named = [p.rsplit("/", 1)[1] for p in modules.split()[1:-1]]
    assert tuple(named) == helpers_pod.MODULES
