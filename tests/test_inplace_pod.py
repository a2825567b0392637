"""What an in-place worker pod carries (``inplace_pod``), and that its watch container behaves
as the kubelet will run it: its script runs here under /bin/sh against files laid out as the
downward-API volume is. Pure, but for the shell."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ddp_operator.manifests import builders, inplace_pod, job_configmap
from ddp_operator.model import constants as c
from ddp_operator.model import pod_status
from ddp_operator.model.jobspec import resolve

from jobs import ddpjob


def pod(attempt: int = 2, **spec):
    return builders.build_worker_pod(resolve(ddpjob("j", "ns", nodes=2, **spec)), 1, attempt, True)


def test_the_attempt_is_an_annotation_and_ddp_attempt_comes_from_the_jobs_configmap() -> None:
    p = pod()
    assert p["metadata"]["annotations"]["ddp-operator.io/attempt"] == "2"
    # One key, one meaning: the attempt it runs (annotation), the one it was created in (label).
    assert p["metadata"]["labels"]["ddp-operator.io/created-in-attempt"] == "2"
    assert "ddp-operator.io/attempt" not in p["metadata"]["labels"]
    env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
    assert env["DDP_ATTEMPT"] == {
        "name": "DDP_ATTEMPT",
        "valueFrom": {"configMapKeyRef": {"name": "j-ddp-env", "key": "DDP_ATTEMPT"}},
    }
    assert env["NODE_RANK"]["value"] == "1"  # the rest of the contract is unchanged


def test_only_the_watch_restarts_the_pod_and_only_on_its_code() -> None:
    p = pod()
    spec = p["spec"]
    trainer, watch = spec["containers"]
    assert spec["restartPolicy"] == "Never" and "restartPolicyRules" not in trainer
    assert "initContainers" not in spec
    assert watch["name"] == "ddp-attempt-watch" and watch["restartPolicy"] == "OnFailure"
    assert watch["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [86]}}
    ]
    assert watch["image"] == trainer["image"] and watch["env"] == [
        job_configmap.attempt_env("j-ddp-env")
    ]
    assert watch["resources"]["requests"] == watch["resources"]["limits"]
    sc = watch["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] > 0 and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert [v["name"] for v in spec["volumes"]].count("ddp-attempt") == 1  # below: its sources
    assert p["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "trainer"


def test_a_worker_whose_trainer_runs_reads_2_of_2_ready() -> None:
    """A worker training reads `READY 2/2` (seen on the real node, also after an in-place
    restart): nothing the operator adds to the trainer has a probe, and the watch's readiness
    passes unless it found the trainer's processes quiet (a hang: then `1/2`, issue 54). Its
    probe only reads the watch's own file. Once its trainer has ended, the watch keeps the pod
    for its group's next attempt: `1/2`, kubectl's `NotReady` (a Completed container beside a
    running one) until the job is done (docs: Restarts)."""
    trainer, watch = pod()["spec"]["containers"]
    assert (trainer["name"], watch["name"]) == ("trainer", "ddp-attempt-watch")
    assert not {"readinessProbe", "startupProbe", "livenessProbe"} & trainer.keys()
    assert not {"startupProbe", "livenessProbe"} & watch.keys()
    assert watch["readinessProbe"]["exec"]["command"] == [
        "/bin/sh",
        "-c",
        "test ! -s /ddp-activity/quiet",
    ]
    assert {"name": "ddp-activity", "mountPath": "/ddp-activity"} in watch["volumeMounts"]


def test_the_users_containers_and_rules_are_kept() -> None:
    template = {
        "spec": {
            "initContainers": [{"name": "fetch", "image": "x"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "t",
                    "restartPolicyRules": [
                        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}
                    ],
                },
                {"name": "logger", "image": "l"},
            ],
        }
    }
    spec = pod(template=template)["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch"]
    assert [c["name"] for c in spec["containers"]] == ["trainer", "logger", "ddp-attempt-watch"]
    rules = spec["containers"][0]["restartPolicyRules"]
    assert [r["action"] for r in rules] == ["Restart"]
    assert inplace_pod.carried(pod(template=template))
    plain = builders.build_worker_pod(resolve(ddpjob("j", "ns", nodes=2)), 1, 0)
    assert not inplace_pod.carried(plain) and len(plain["spec"]["containers"]) == 1


def _watch(
    root: Path,
    started_with: str,
    path: str | None = None,
    release_after: int = 300,
    proc: Path | None = None,
    launcher: tuple[str, ...] = (),
) -> subprocess.Popen:
    """The watch script in a real ``sh``, its downward-API files in ``root`` and, given
    ``proc``, a stand-in for the pod's process table there."""
    script = inplace_pod.watch_script(release_after).replace(inplace_pod.ATTEMPT_DIR, str(root))
    if proc is not None:
        script = script.replace(f"{inplace_pod.PROC_DIR}/[0-9]", f"{proc}/[0-9]")
    env = {**os.environ, "DDP_ATTEMPT": started_with, "PATH": path or os.environ["PATH"]}
    command = [*launcher, "/bin/sh", "-c", script]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def test_the_watch_exits_86_once_the_attempt_moves_on(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("1")  # no newline, as the kubelet writes it
    (tmp_path / "finished").write_text("")  # the annotation is not set
    watch = _watch(tmp_path, "1")
    time.sleep(1)
    assert watch.poll() is None
    (tmp_path / "attempt").write_text("2")
    assert watch.wait(timeout=10) == 86
    # Started after the operator moved on again (a restart for 2 while 3 was given): at once.
    assert _watch(tmp_path, "1").wait(timeout=10) == 86


def test_the_watch_waits_until_the_kubelets_copy_of_the_configmap_says_the_attempt_too(
    tmp_path: Path,
) -> None:
    """The annotation moved on before the kubelet's copy of the job's ConfigMap (``given``):
    the containers restarted now would read the old DDP_ATTEMPT, so the watch waits for it."""
    (tmp_path / "attempt").write_text("1")
    (tmp_path / "finished").write_text("")
    (tmp_path / "given").write_text("1")
    watch = _watch(tmp_path, "1")
    (tmp_path / "attempt").write_text("2")
    time.sleep(1)
    assert watch.poll() is None  # told 2, the ConfigMap's copy still says 1
    (tmp_path / "given").write_text("2")
    assert watch.wait(timeout=10) == 86


def test_the_watchs_volume_projects_the_annotations_and_the_configmaps_attempt() -> None:
    (volume,) = [v for v in pod()["spec"]["volumes"] if v["name"] == "ddp-attempt"]
    downward, configmap = volume["projected"]["sources"]
    paths = {i["path"]: i["fieldRef"]["fieldPath"] for i in downward["downwardAPI"]["items"]}
    assert paths == {
        "attempt": "metadata.annotations['ddp-operator.io/attempt']",
        "finished": "metadata.annotations['ddp-operator.io/finished']",
    }
    assert configmap["configMap"] == {
        "name": "j-ddp-env",
        "items": [{"key": "DDP_ATTEMPT", "path": "given"}],
        "optional": True,  # none (or no key): the annotation alone decides, as before
    }


def test_the_watch_exits_0_once_the_job_has_finished(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("0")
    (tmp_path / "finished").write_text("")
    watch = _watch(tmp_path, "0")
    time.sleep(1)
    assert watch.poll() is None
    (tmp_path / "finished").write_text("true")
    assert watch.wait(timeout=10) == 0


def test_a_missing_attempt_annotation_is_no_new_attempt(tmp_path: Path) -> None:
    """The annotation removed (by hand, or by a tool that rewrote the pod's metadata): the
    downward-API file reads empty, and the watch keeps the pod as it is."""
    (tmp_path / "attempt").write_text("")
    (tmp_path / "finished").write_text("")
    watch = _watch(tmp_path, "1")
    time.sleep(1)
    assert watch.poll() is None
    (tmp_path / "attempt").write_text("2")
    assert watch.wait(timeout=10) == 86


def test_the_watch_needs_only_sleep_and_naps_a_second_where_it_takes_no_fraction(
    tmp_path: Path,
) -> None:
    """POSIX ``sleep`` takes whole seconds: a stand-in that refuses ``0.2`` makes the watch nap
    a second, and it still exits 86; without any ``sleep`` on its PATH it exits 127 saying so,
    which the operator reads as a watch that cannot run (``inplace_fallback``)."""
    (tmp_path / "attempt").write_text("1")
    (tmp_path / "finished").write_text("")
    whole = tmp_path / "bin"
    whole.mkdir()
    (whole / "sleep").write_text(
        '#!/bin/sh\ncase "$1" in *.*) echo "sleep: invalid time" >&2; exit 1;; esac\n'
        'exec /bin/sleep "$1"\n'
    )
    (whole / "sleep").chmod(0o755)
    watch = _watch(tmp_path, "1", path=str(whole))
    time.sleep(1.5)
    assert watch.poll() is None
    (tmp_path / "attempt").write_text("2")
    assert watch.wait(timeout=10) == 86
    lacking = _watch(tmp_path, "2", path=str(tmp_path / "nothing"))
    out, _ = lacking.communicate(timeout=10)
    assert lacking.returncode == c.WATCH_LACKS_EXIT_CODE == 127
    assert "no sleep command in the trainer's image" in out
    status = {
        "name": "ddp-attempt-watch",
        "state": {"terminated": {"exitCode": 127, "message": out}},
    }
    assert "no sleep command" in (pod_status.cannot_start(status, c.WATCH_LACKS_EXIT_CODE) or "")


def test_a_pod_is_told_its_attempt_with_when_and_its_trainers_restart_count() -> None:
    assert inplace_pod.told(3, "2026-11-26T12:00:00Z", 5) == {
        "ddp-operator.io/attempt": "3",
        "ddp-operator.io/told-at": "2026-11-26T12:00:00Z",
        "ddp-operator.io/restarts-when-told": "5",
    }
    with_container = inplace_pod.told(3, "2026-11-26T12:00:00Z", 5, "containerd://aaa")
    assert with_container["ddp-operator.io/container-when-told"] == "containerd://aaa"


def test_the_watch_ends_alone_once_its_trainer_has_been_gone_a_while(tmp_path: Path) -> None:
    """Without the operator: sharing the pod's process namespace, the watch sees only itself
    and the sandbox (PID 1) once its trainer ended, and exits 0 after ``release_after``
    seconds with no new attempt; the pod then ends as its trainer did, its devices free."""
    (tmp_path / "attempt").write_text("0")
    (tmp_path / "finished").write_text("")
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "4242").mkdir()  # the trainer
    watch = _watch(tmp_path, "0", release_after=1, proc=proc)
    time.sleep(2)
    assert watch.poll() is None  # its trainer runs
    (proc / "4242").rmdir()
    assert watch.wait(timeout=10) == 0


def test_a_watch_alone_in_its_process_namespace_never_ends_alone(tmp_path: Path) -> None:
    """A template with ``shareProcessNamespace: false``: the watch is PID 1 and sees no
    trainer, which it must not take for one that ended; it keeps the pod until told."""
    (tmp_path / "attempt").write_text("0")
    (tmp_path / "finished").write_text("")
    alone = ("unshare", "--pid", "--fork", "--mount-proc")
    watch = _watch(tmp_path, "0", release_after=1, launcher=alone)
    time.sleep(2.5)
    assert watch.poll() is None
    (tmp_path / "attempt").write_text("1")
    assert watch.wait(timeout=10) == 86


def test_in_place_pods_share_their_process_namespace_unless_the_template_says_not() -> None:
    assert pod()["spec"]["shareProcessNamespace"] is True
    template = {"spec": {"shareProcessNamespace": False, "containers": [{"name": "trainer"}]}}
    assert pod(template=template)["spec"]["shareProcessNamespace"] is False


def test_the_shells_own_pid_survives_the_kubelets_expansion_of_the_command() -> None:
    """The kubelet turns ``$$`` in a command into ``$`` (seen on the real node: the watch read
    its PID as ``$`` and never ended alone); written ``$$$$``, the shell gets ``$$``."""
    command = pod()["spec"]["containers"][-1]["command"][2]
    assert command.replace("$$", "$") == inplace_pod.watch_script()
