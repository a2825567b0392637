"""Raw: a plain concurrent client creating the Service, ConfigMaps and pods our operator would
create, with no controller at all: what this API server and scheduler can do with them."""

from __future__ import annotations

from typing import Any

from ddp_operator.manifests import builders, job_configmap, progress_pod, worker_env
from ddp_operator.model import constants as c
from ddp_operator.model.jobspec import resolve

from cluster import pod_spec
from contenders.base import Contender, drain

# Where ours' pods report progress: the benchmark runs the operator with its endpoint on.
PROGRESS_URL = "http://127.0.0.1:1"


def objects(
    name: str, ns: str, nodes: int, restart: str = c.RESTART_IN_PLACE
) -> list[dict[str, Any]]:
    """The Service, ConfigMaps and pods our operator would create on this cluster (restarting as
    ``restart`` says: in place by default, as ours; reporting progress), without the owner (no
    DDPJob exists)."""
    spec = {"nodes": nodes, "restartStrategy": restart, "template": {"spec": pod_spec("trainer")}}
    job = resolve({"metadata": {"name": name, "namespace": ns, "uid": "raw"}, "spec": spec})
    meta = builders.job_object_meta(job, job_configmap.name(name))
    configmap = job_configmap.build(meta, nodes, builders.worker_hosts(job), 0)
    common = worker_env.build(builders.job_object_meta(job, worker_env.name(job)), job)
    objs = [builders.build_service(job), configmap, common]
    in_place = job.restart_strategy == c.RESTART_IN_PLACE
    objs += [
        progress_pod.add_reporting(builders.build_worker_pod(job, i, 0, in_place), PROGRESS_URL)
        for i in range(nodes)
    ]
    for o in objs:
        o["metadata"].pop("ownerReferences", None)
    return objs


class Raw(Contender):
    name, title = "raw", "raw"
    job_label = c.LABEL_JOB
    restart = c.RESTART_IN_PLACE

    def create(self, ns: str, names: list[str], nodes: int) -> None:
        """Services and ConfigMaps first, as the operator does, then every pod concurrently."""
        objs = [o for n in names for o in objects(n, ns, nodes, self.restart)]
        core = self.cluster.core
        list(
            self.pool.map(
                lambda o: drain(core.create_namespaced_service(ns, o, _preload_content=False)),
                [o for o in objs if o["kind"] == "Service"],
            )
        )
        list(
            self.pool.map(
                lambda o: drain(core.create_namespaced_config_map(ns, o, _preload_content=False)),
                [o for o in objs if o["kind"] == "ConfigMap"],
            )
        )
        list(
            self.pool.map(
                lambda o: drain(core.create_namespaced_pod(ns, o, _preload_content=False)),
                [o for o in objs if o["kind"] == "Pod"],
            )
        )


class RawRecreate(Raw):
    """Raw creating the pods of a job that restarts by recreating them: no in-place watch
    container, its volume or its shared process namespace (``--s5-only``: what they cost)."""

    name, title = "raw-recreate", "raw (Recreate pods)"
    restart = c.RESTART_RECREATE
