"""The trainer image's parts, on this machine: the ddp-wait helper, the example training
script (real DDP on CPU), and the Dockerfile checked as far as no Docker engine allows."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from harness.cluster import ROOT

BIN = Path(sys.executable).parent
DOCKERFILE = ROOT / "trainer_image" / "Dockerfile"


def ddp_wait(env: dict[str, str], *command: str, timeout: str = "2") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ddp-wait"), "--timeout", timeout, "--", *command],
        env={"PATH": str(BIN), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_ddp_wait_runs_the_command_once_master_accepts() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        env = {"MASTER_ADDR": "localhost", "MASTER_PORT": str(port), "NODE_RANK": "1"}
        result = ddp_wait(env, "python", "-c", "print('training')")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "training"
    assert "accepts connections" in result.stderr


def test_ddp_wait_worker0_does_not_wait_for_its_own_port() -> None:
    env = {"MASTER_ADDR": "localhost", "MASTER_PORT": "1", "NODE_RANK": "0"}
    result = ddp_wait(env, "python", "-c", "print('master')")
    assert result.returncode == 0 and result.stdout.strip() == "master"


def test_ddp_wait_gives_up_on_a_name_that_never_resolves() -> None:
    env = {"MASTER_ADDR": "no-such-worker-0.invalid", "NODE_RANK": "1"}
    result = ddp_wait(env, "true", timeout="1")
    assert result.returncode == 124
    assert "no-such-worker-0.invalid does not resolve" in result.stderr
    assert "gave up after 1s" in result.stderr


def test_ddp_wait_gives_up_on_a_closed_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": "2"}
        result = ddp_wait(env, "true", timeout="1")
    assert result.returncode == 124
    assert f"127.0.0.1:{port} does not accept connections" in result.stderr


@pytest.mark.torch
def test_example_training_converges_checkpoints_and_resumes(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "train-cpu.yaml").read_text())
    trainer = doc["spec"]["template"]["spec"]["containers"][0]
    trainer["env"] = [{"name": "CHECKPOINT_DIR", "value": str(tmp_path / "ckpt")}]
    manifest = tmp_path / "train.yaml"
    manifest.write_text(yaml.safe_dump(doc))

    def run() -> str:
        result = subprocess.run(
            [str(BIN / "kubectl-ddp"), "local", str(manifest)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    out = run()
    losses = [float(x) for x in re.findall(r"epoch \d+ loss ([0-9.]+) world 4", out)]
    assert len(losses) == 4 and losses[-1] < losses[0] / 100, out
    w, b = map(float, re.search(r"TRAINED w=(\S+) b=(\S+)", out).groups())
    assert abs(w - 3) < 0.05 and abs(b + 2) < 0.05
    assert (tmp_path / "ckpt" / "checkpoint.pt").exists()
    # A second run (a restarted group) resumes after the last finished epoch.
    again = run()
    assert "resumed from" in again and "epoch 0 " not in again


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


@pytest.mark.parametrize(
    ("path", "entrypoint"),
    [(DOCKERFILE, ["ddp-wait", "--"]), (ROOT / "Dockerfile", ["ddp-operator"])],
    ids=["trainer", "operator"],
)
def test_dockerfile_is_well_formed(path: Path, entrypoint: list[str]) -> None:
    """What can be checked without a Docker engine: known instructions, every COPY source
    present in the build context, a non-root user in the final stage, the entrypoint."""
    known = {"ARG", "FROM", "RUN", "COPY", "USER", "WORKDIR", "ENV", "ENTRYPOINT", "CMD", "EXPOSE"}
    instructions = dockerfile_instructions(path)
    assert {op for op, _ in instructions} <= known
    assert any(op == "FROM" for op, _ in instructions)
    for op, rest in instructions:
        if op == "COPY" and "--from=" not in rest:
            *sources, _dest = [w for w in shlex.split(rest) if not w.startswith("--")]
            for src in sources:
                assert (ROOT / src).exists(), f"COPY source {src} missing"
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    final = instructions[last_from:]
    users = [rest for op, rest in final if op == "USER"]
    assert users and users[-1] not in ("0", "root")
    assert not any("gcc" in rest or "build-essential" in rest for op, rest in final if op == "RUN")
    entry = [rest for op, rest in instructions if op == "ENTRYPOINT"][-1]
    assert yaml.safe_load(entry) == entrypoint


def test_trainer_helper_needs_only_the_standard_library() -> None:
    """ddp-wait is copied alone into trainer images: it must run with the standard library."""
    helper = ROOT / "operator" / "ddp_operator" / "commands" / "ddp_wait.py"
    imports = re.findall(r"^(?:from|import) (\S+)", helper.read_text(), re.M)
    assert all(m.split(".")[0] in sys.stdlib_module_names or m == "__future__" for m in imports)


def test_the_image_default_torch_is_the_one_the_tests_run() -> None:
    """The Dockerfile's TORCH_VERSION is the trainer extra's pinned torch (what these tests run)."""
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_pin = next(r for r in pinned["optional-dependencies"]["trainer"] if r.startswith("torch"))
    args = dict(
        rest.split("=", 1)
        for op, rest in dockerfile_instructions(DOCKERFILE)
        if op == "ARG" and "=" in rest
    )
    assert torch_pin == f"torch=={args['TORCH_VERSION']}"
    assert version("torch").split("+")[0] == args["TORCH_VERSION"]
