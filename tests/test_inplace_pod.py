"""What an in-place worker pod carries (``inplace_pod``), and that its gate and sidecar behave as
the kubelet will run them: their scripts run here under /bin/sh against files laid out as the
downward-API volume and the emptyDir are. Pure, but for the shell."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ddp_operator import builders, inplace_pod
from ddp_operator.jobspec import resolve

from jobs import ddpjob


def pod(attempt: int = 2, **spec):
    return builders.build_worker_pod(resolve(ddpjob("j", "ns", nodes=2, **spec)), 1, attempt, True)


def test_the_attempt_is_an_annotation_and_ddp_attempt_comes_from_it() -> None:
    p = pod()
    assert p["metadata"]["annotations"]["ddp-operator.io/attempt"] == "2"
    assert p["metadata"]["labels"]["ddp-operator.io/attempt"] == "2"
    env = {e["name"]: e for e in p["spec"]["containers"][0]["env"]}
    path = "metadata.annotations['ddp-operator.io/attempt']"
    assert env["DDP_ATTEMPT"] == {
        "name": "DDP_ATTEMPT",
        "valueFrom": {"fieldRef": {"fieldPath": path}},
    }
    assert env["NODE_RANK"]["value"] == "1"  # the rest of the contract is unchanged


def test_the_trainer_restarts_the_pod_on_any_failure_and_the_sidecar_on_its_code() -> None:
    spec = pod()["spec"]
    trainer = spec["containers"][0]
    assert trainer["restartPolicy"] == "Never" and spec["restartPolicy"] == "Never"
    assert trainer["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}
    ]
    gate, watch = spec["initContainers"][:2]
    assert (gate["name"], watch["name"]) == ("ddp-attempt-gate", "ddp-attempt-watch")
    assert "restartPolicy" not in gate and watch["restartPolicy"] == "Always"
    assert watch["restartPolicyRules"][0]["exitCodes"] == {"operator": "In", "values": [86]}
    assert gate["image"] == trainer["image"]
    for helper in (gate, watch):
        assert helper["resources"]["requests"] == helper["resources"]["limits"]
        sc = helper["securityContext"]
        assert sc["runAsNonRoot"] and sc["runAsUser"] > 0 and not sc["allowPrivilegeEscalation"]
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "downwardAPI" in volumes["ddp-attempt"] and "emptyDir" in volumes["ddp-attempt-state"]


def test_the_users_init_containers_and_rules_come_after_ours() -> None:
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
                }
            ],
        }
    }
    spec = pod(template=template)["spec"]
    assert [c["name"] for c in spec["initContainers"]] == [
        "ddp-attempt-gate",
        "ddp-attempt-watch",
        "fetch",
    ]
    rules = spec["containers"][0]["restartPolicyRules"]
    assert [r["action"] for r in rules] == ["Restart", "RestartAllContainers"]
    assert inplace_pod.carried(pod(template=template))
    plain = builders.build_worker_pod(resolve(ddpjob("j", "ns", nodes=2)), 1, 0)
    assert not inplace_pod.carried(plain) and "initContainers" not in plain["spec"]


def _script(text: str, root: Path) -> str:
    # The state folder's name begins with the attempt folder's: it goes first.
    text = text.replace(inplace_pod.STATE_DIR, str(root / "s"))
    return text.replace(inplace_pod.ATTEMPT_DIR, str(root / "a"))


def test_the_gate_passes_a_new_attempt_and_holds_a_restart_nobody_asked_for(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "s").mkdir()
    given = tmp_path / "a" / "value"
    given.write_text("0")  # no newline, as the kubelet writes it
    gate = _script(inplace_pod.GATE_SCRIPT, tmp_path)
    subprocess.run(["/bin/sh", "-c", gate], check=True, timeout=10)  # the first start
    assert (tmp_path / "s" / "started").read_text() == "0\n"
    held = subprocess.Popen(["/bin/sh", "-c", gate])  # restarted, same attempt: held
    time.sleep(1)
    assert held.poll() is None
    given.write_text("1")
    assert held.wait(timeout=10) == 0
    assert (tmp_path / "s" / "started").read_text() == "1\n"


def test_the_sidecar_exits_with_its_code_once_the_attempt_moves_on(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "s").mkdir()
    (tmp_path / "a" / "value").write_text("1")
    (tmp_path / "s" / "started").write_text("1\n")
    watch = subprocess.Popen(["/bin/sh", "-c", _script(inplace_pod.WATCH_SCRIPT, tmp_path)])
    time.sleep(1)
    assert watch.poll() is None
    (tmp_path / "a" / "value").write_text("2")
    assert watch.wait(timeout=10) == 86
