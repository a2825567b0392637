"""The SDK's job_manifest (pure): placement, resources, volumes and env as keywords, laid over
a given pod template, and carried into the worker pods the operator builds; the clients'
``job_manifest`` methods and what a ``with`` block needs without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ddp_operator.manifests.builders import build_worker_pod
from ddp_operator.model.jobspec import resolve
from ddp_operator.sdk import Client, LocalClient, job_manifest

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def worker_pod(job: dict[str, Any]) -> dict[str, Any]:
    """Worker 0's pod as the operator would create it for ``job``."""
    body = {**job, "metadata": {**job["metadata"], "namespace": "ns", "uid": "u"}}
    return build_worker_pod(resolve(body), 0)


def test_a_plain_call_makes_the_job_it_always_made() -> None:
    job = job_manifest("examples/scripts/train.py", image="img", name="t", env={"A": "1"})
    assert job == {
        "apiVersion": "ddp-operator.io/v1alpha1",
        "kind": "DDPJob",
        "metadata": {"name": "t"},
        "spec": {
            "nodes": 2,
            "procsPerNode": 1,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "img",
                            "args": ["torchrun", "examples/scripts/train.py"],
                            "env": [{"name": "A", "value": "1"}],
                        }
                    ]
                }
            },
        },
    }


def test_placement_resources_volumes_and_env_reach_the_worker_pods() -> None:
    job = job_manifest(
        "train.py",
        image="img",
        env={"OMP_NUM_THREADS": 2},  # a number is written as the string the API needs
        resources={"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
        node_selector={"pool": "gpu"},
        tolerations=[GPU_TAINT],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
        volume_mounts=[{"name": "data", "mountPath": "/data", "readOnly": True}],
        accelerator={"resource": "nvidia.com/gpu", "perNode": 2},  # a spec field
    )
    pod = worker_pod(job)["spec"]
    trainer = pod["containers"][0]
    assert pod["nodeSelector"] == {"pool": "gpu"} and GPU_TAINT in pod["tolerations"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}} in pod["volumes"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in trainer["volumeMounts"]
    assert {"name": "OMP_NUM_THREADS", "value": "2"} in trainer["env"]
    assert trainer["resources"] == {  # the operator adds the accelerator's to the SDK's
        "requests": {"cpu": "500m", "nvidia.com/gpu": "2"},
        "limits": {"memory": "1Gi", "nvidia.com/gpu": "2"},
    }


def test_the_options_merge_into_a_given_template_which_stays_unchanged() -> None:
    template = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {
            "nodeSelector": {"zone": "z1"},
            "tolerations": [GPU_TAINT],
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "containers": [
                {"name": "sidecar", "image": "s"},
                {
                    "name": "trainer",
                    "image": "old",
                    "workingDir": "/w",
                    "env": [{"name": "A", "value": "old"}, {"name": "B", "value": "kept"}],
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                },
            ],
        },
    }
    before = yaml.safe_dump(template)
    job = job_manifest(
        "train.py",
        image="new",
        template=template,
        env={"A": "new"},
        resources={"requests": {"cpu": "250m"}},
        node_selector={"pool": "p"},
        tolerations=[{"key": "k", "operator": "Exists"}],
        volumes=[{"name": "data", "emptyDir": {}}],
        volume_mounts=[{"name": "cache", "mountPath": "/cache"}],
    )
    assert yaml.safe_dump(template) == before
    made = job["spec"]["template"]
    pod = made["spec"]
    sidecar, trainer = pod["containers"]
    assert made["metadata"] == {"labels": {"team": "a"}}
    assert sidecar == {"name": "sidecar", "image": "s"}
    assert trainer["image"] == "new" and trainer["args"] == ["torchrun", "train.py"]
    assert trainer["workingDir"] == "/w"
    assert trainer["env"] == [{"name": "B", "value": "kept"}, {"name": "A", "value": "new"}]
    assert trainer["resources"] == {"requests": {"cpu": "250m", "memory": "2Gi"}}
    assert trainer["volumeMounts"] == [{"name": "cache", "mountPath": "/cache"}]
    assert pod["nodeSelector"] == {"zone": "z1", "pool": "p"}
    assert pod["tolerations"] == [GPU_TAINT, {"key": "k", "operator": "Exists"}]
    assert [v["name"] for v in pod["volumes"]] == ["cache", "data"]
    # Without a container named trainer, the first is the trainer, as for the operator.
    first = job_manifest("t.py", image="i", template={"spec": {"containers": [{"name": "main"}]}})
    assert first["spec"]["template"]["spec"]["containers"] == [
        {"name": "trainer", "image": "i", "args": ["torchrun", "t.py"]}
    ]


def test_pod_and_container_are_laid_last_key_by_key() -> None:
    job = job_manifest(
        "train.py",
        image="img",
        node_selector={"pool": "p"},
        env={"A": "1"},
        pod={"priorityClassName": "high", "nodeSelector": {"only": "this"}},
        container={"imagePullPolicy": "IfNotPresent", "workingDir": "/src"},
    )
    pod = job["spec"]["template"]["spec"]
    trainer = pod["containers"][0]
    assert pod["priorityClassName"] == "high" and pod["nodeSelector"] == {"only": "this"}
    assert trainer["imagePullPolicy"] == "IfNotPresent" and trainer["workingDir"] == "/src"
    assert trainer["env"] == [{"name": "A", "value": "1"}] and trainer["image"] == "img"


def test_mistakes_the_api_server_would_refuse_for_every_worker_are_refused_here() -> None:
    with pytest.raises(ValueError, match="resources: request: only requests and limits"):
        job_manifest("t.py", image="i", resources={"request": {"cpu": "1"}})
    with pytest.raises(ValueError, match="volume_mounts: no volume named data"):
        job_manifest("t.py", image="i", volume_mounts=[{"name": "data", "mountPath": "/d"}])
    # A volume given by pod= counts.
    job_manifest(
        "t.py",
        image="i",
        volume_mounts=[{"name": "data", "mountPath": "/d"}],
        pod={"volumes": [{"name": "data", "emptyDir": {}}]},
    )


def test_the_clients_make_the_same_manifest_as_the_module_function(tmp_path: Path) -> None:
    # A kubeconfig of a server never reached: a Client connects only on its first call.
    kubeconfig = tmp_path / "config"
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}
    contexts = [
        {"name": "one", "context": {"cluster": "c", "user": "u", "namespace": "first"}},
        {"name": "two", "context": {"cluster": "c", "user": "u", "namespace": "second"}},
    ]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": contexts,
        "current-context": "one",
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    kw: dict[str, Any] = {"nodes": 3, "name": "n", "resources": {"requests": {"cpu": "1"}}}
    with Client(kubeconfig=str(kubeconfig)) as client:
        assert client.namespace == "first"
        assert client.job_manifest("t.py", image="i", **kw) == job_manifest("t.py", image="i", **kw)
    assert Client(kubeconfig=str(kubeconfig), context="two").namespace == "second"
    with LocalClient() as local:
        assert local.job_manifest("t.py", **kw) == job_manifest("t.py", image="local", **kw)
