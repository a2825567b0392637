"""Kubeflow's training operator v1 (bench/peer/build.sh builds it from its Go module) as its
manifests run it (client QPS 20, burst 30), on equivalent PyTorchJobs (1 Master + N-1 Workers).
It watches one namespace, which every run reuses."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from cluster import RESULTS, ROOT, free_port, log, pod_spec, stop, unless, wait_http
from contenders.base import Contender, process_dead

NS = "bench-kubeflow"
API = ("kubeflow.org", "v1", "pytorchjobs")
CERTS = Path("/tmp/k8s-webhook-server/serving-certs")  # its pod's Secret mount, here


def pytorchjob(name: str, ns: str, nodes: int) -> dict[str, Any]:
    """A PyTorchJob of 1 Master and nodes-1 Workers; a worker killed (137) is recreated."""

    def replicas(n: int) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "ExitCode",
            "template": {"spec": {**pod_spec("pytorch"), "restartPolicy": "Never"}},
        }

    specs = {"Master": replicas(1)}
    if nodes > 1:
        specs["Worker"] = replicas(nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pytorchReplicaSpecs": specs, "runPolicy": {"cleanPodPolicy": "None"}},
    }


def webhook_configuration() -> dict[str, Any]:
    """Where it injects its CA: it selects no object, so the API server never calls it."""
    rule = {
        "apiGroups": ["kubeflow.org"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pytorchjobs"],
    }
    return {
        "metadata": {"name": "validator.training-operator.kubeflow.org"},
        "webhooks": [
            {
                "name": "validator.pytorchjob.training-operator.kubeflow.org",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "objectSelector": {"matchLabels": {"never": "selected"}},
                "clientConfig": {"service": {"name": "training-operator", "namespace": "kubeflow"}},
                "rules": [rule],
            }
        ],
    }


class Kubeflow(Contender):
    name, title = "kubeflow", "Kubeflow v1"
    job_label = "training.kubeflow.org/job-name"
    job_api = API
    group_restart = False  # restartPolicy ExitCode recreates the failed pod only
    shared = frozenset({NS})

    proc: subprocess.Popen | None = None

    def decides(self, labels: dict[str, str]) -> bool:
        """Its default success policy: the job is done when its Master succeeds."""
        return labels.get("training.kubeflow.org/replica-type") == "master"

    def setup(self) -> None:
        """Its CRD, namespaces, certificate Secret and webhook configuration."""
        binary = self.binary()
        gomodcache = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        ).stdout.strip()
        version = Path(binary).parent.name.split("-")[2]
        crd = Path(gomodcache) / f"github.com/kubeflow/training-operator@{version}"
        crd = crd / "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
        self.cluster.kubectl("apply", "--server-side", "-f", str(crd))
        self.cluster.namespace("kubeflow")
        self.cluster.namespace(NS)
        with unless(409):
            self.cluster.core.create_namespaced_secret(
                "kubeflow", {"metadata": {"name": "training-operator-webhook-cert"}}
            )
        with unless(409):
            client.AdmissionregistrationV1Api(
                self.cluster.api
            ).create_validating_webhook_configuration(webhook_configuration())

    def binary(self) -> str:
        if not hasattr(self, "_binary"):
            log("building (or finding cached) Kubeflow's training operator")
            self._binary = subprocess.run(
                [str(ROOT / "bench/peer/build.sh")], capture_output=True, text=True, check=True
            ).stdout.strip()
        return self._binary

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self.setup()
        with open(RESULTS / "kubeflow.log", "ab") as logf:
            proc = subprocess.Popen(
                [
                    self.binary(),
                    f"--namespace={NS}",
                    "--enable-scheme=pytorchjob",
                    f"--metrics-bind-address=127.0.0.1:{free_port()}",
                    f"--health-probe-bind-address=127.0.0.1:{(probe := free_port())}",
                    f"--webhook-server-port={free_port()}",
                    "--zap-log-level=error",
                ],
                env={
                    **os.environ,
                    "KUBECONFIG": self.cluster.kubeconfig,
                    "MY_POD_NAMESPACE": "kubeflow",
                },
                stdout=logf,
                stderr=logf,
            )
            self.proc = proc
            try:
                self._certificates(proc, time.monotonic() + 120)
                # Ready once its controllers run: its readyz check waits for the certificates.
                wait_http(
                    f"http://127.0.0.1:{probe}/readyz", proc, time.monotonic() + 120, "kubeflow"
                )
                yield
            finally:
                self.proc = None
                stop(proc)

    def _certificates(self, proc: subprocess.Popen, deadline: float) -> None:
        """Its webhook certificates, from the Secret it writes to where its pod would mount them."""
        while True:
            secret = self.cluster.core.read_namespaced_secret(
                "training-operator-webhook-cert", "kubeflow"
            )
            if secret.data and "tls.crt" in secret.data:
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(
                    "Kubeflow's operator wrote no certificates; see bench/results/kubeflow.log"
                )
            time.sleep(0.5)
        CERTS.mkdir(parents=True, exist_ok=True)
        for key, value in secret.data.items():
            (CERTS / key).write_bytes(base64.b64decode(value))

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def dead(self) -> str | None:
        alive = self.proc is not None and self.proc.poll() is None
        return (
            None if alive else process_dead(None, "Kubeflow's operator", RESULTS / "kubeflow.log")
        )

    def namespace(self, tag: str) -> str:
        """Its one namespace (it watches no other), emptied."""
        self.used.add(NS)
        self.drop(NS)
        return NS

    def jobs(self, ns: str, names: list[str], nodes: int) -> list[dict[str, Any]]:
        return [pytorchjob(n, ns, nodes) for n in names]
