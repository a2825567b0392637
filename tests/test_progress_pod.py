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


def test_the_trainer_gets_kubeflow_trainer_s_names_too_unless_its_template_sets_them() -> None:
    """Hugging Face's KubeflowCallback switches itself on when KUBEFLOW_TRAINER_SERVER_URL is
    set and posts there with the token read from KUBEFLOW_TRAINER_SERVER_TOKEN."""
    job = resolve(ddpjob("j", "team-a", nodes=1))
    pod = progress_pod.add_reporting(builders.build_worker_pod(job, 0), "http://op:8090")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
        "http://op:8090/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/j/status"
    )
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == env["DDP_PROGRESS_TOKEN"]
    assert "KUBEFLOW_TRAINER_SERVER_CA_CERT" not in env  # not TLS: the callback needs none
    mine = {"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "https://trainer.example/x"}
    template = {"spec": {"containers": [{"name": "trainer", "image": "t", "env": [mine]}]}}
    own = resolve(ddpjob("j", "team-a", nodes=1, template=template))
    pod = progress_pod.add_reporting(builders.build_worker_pod(own, 0), "http://op:8090")
    urls = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == mine["name"]]
    assert urls == [mine]
