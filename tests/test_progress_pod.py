"""What a worker pod gets to report progress: the job's URL and a pod-bound token."""

from __future__ import annotations

from ddp_operator.manifests import builders, progress_pod
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def test_the_trainer_gets_the_url_and_a_token_of_the_progress_audience() -> None:
    job = resolve(
        ddpjob("j", "team-a", nodes=2)
        | {"metadata": {"name": "j", "namespace": "team-a", "uid": "u"}}
    )
    pod = progress_pod.add_reporting(builders.build_worker_pod(job, 1), "http://op.sys.svc:8090/")
    trainer = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert (
        env["DDP_PROGRESS_URL"] == "http://op.sys.svc:8090/v1/namespaces/team-a/ddpjobs/j/progress"
    )
    assert env["DDP_PROGRESS_TOKEN"] == "/var/run/secrets/ddp-operator.io/progress/token"
    mount = trainer["volumeMounts"][-1]
    assert mount["readOnly"] and env["DDP_PROGRESS_TOKEN"].startswith(mount["mountPath"])
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token == {
        "audience": "ddp-operator.io/progress",
        "expirationSeconds": 3600,
        "path": "token",
    }
