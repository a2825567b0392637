"""Every example under examples/ runs a script that exists in its image, and the GPU examples'
images carry a torch the docs' features need.

Each DDPJob of each example file is built into its worker pods by the operator's own builder;
the script its trainer's command runs must then be either in the project's trainer image (a
path its Dockerfile copies from this repository, and the file is here) or in a ConfigMap of the
same example file, mounted by the built pod at that path. The scripts the examples bring in
ConfigMaps run here on the CPU (gloo), as their GPU workers run them under torchrun."""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ddp_operator.manifests import builders
from ddp_operator.model.jobspec import resolve

from harness.cluster import ROOT

EXAMPLES = ROOT / "examples"
DOCKERFILE = ROOT / "trainer_image" / "Dockerfile"
TRAINER_IMAGE = re.compile(r"^(?:[\w.:-]+/)*ddp-operator/trainer:[\w.-]+$")
NGC_IMAGE = re.compile(r"^nvcr\.io/nvidia/pytorch:(\d\d\.\d\d)-py3$")
PYTORCH_IMAGE = re.compile(r"^pytorch/pytorch:(\d+\.\d+\.\d+)-")

# The torch each NGC PyTorch release carries, as NVIDIA's PyTorch Release Notes give it
# (docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel-YY-MM.html, "PyTorch
# container image version YY.MM is based on ..."). An NGC build is a snapshot of torch's main
# branch, `X.Y.0a0`: it holds what torch X.(Y-1) released, not yet all of X.Y (see guaranteed()).
NGC_TORCH = {
    "25.12": "2.10.0a0",  # rel-25-12: 2.10.0a0+b4e4ee81d3
    "26.02": "2.11.0a0",  # rel-26-02: 2.11.0a0+eb65b36914
    "26.04": "2.12.0a0",  # rel-26-04: 2.12.0a0
    "26.05": "2.12.0a0",  # rel-26-05: 2.12.0a0 (CUDA 13.2, NCCL 2.30.4)
}

# The oldest torch whose every feature the docs rely on works, each with where the docs say so:
# the higher one is what an example's image must carry.
DOCS_TORCH_MINIMUMS = {
    (2, 8): ("docs/tasks/elastic.md", r"torch 2\.8 or later"),
    (2, 11): ("docs/concepts/env-contract.md", r"2000 from 2\.11"),  # the flight recorder's
}
TORCH_MINIMUM = max(DOCS_TORCH_MINIMUMS)

# Images of examples that are neither the trainer image nor a PyTorch image this file knows how
# to read the torch of, each with why it is left out of the torch check.
OTHER_IMAGES = {
    # Huawei's CANN + torch_npu image: the torch it carries is torch_npu's (2.1.0 here); no
    # Ascend image carries a torch the NGC ones are held to.
    "ascendhub.huawei.com/public-ascendhub/ascend-pytorch:24.0.RC1-A2-2.1.0",
}


@dataclass
class Example:
    """One DDPJob of an example file, its first worker pod as the operator builds it, and the
    ConfigMaps the same file defines (name: data)."""

    path: Path
    job: str
    pod: dict[str, Any]
    configmaps: dict[str, dict[str, str]]

    @property
    def trainer(self) -> dict[str, Any]:
        spec = self.pod["spec"]
        return spec["containers"][builders.trainer_index(spec)]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.job}"


def examples_in(path: Path) -> list[Example]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    configmaps = {
        d["metadata"]["name"]: dict(d.get("data") or {}) for d in docs if d["kind"] == "ConfigMap"
    }
    found = []
    for doc in docs:
        if doc["kind"] != "DDPJob":
            continue
        doc["metadata"].setdefault("namespace", "default")
        doc["metadata"]["uid"] = "uid-example"
        job = resolve(doc)
        found.append(Example(path, job.name, builders.build_worker_pod(job, 0), configmaps))
    return found


ALL = [e for path in sorted(EXAMPLES.rglob("*.yaml")) for e in examples_in(path)]


def test_every_example_file_is_checked() -> None:
    """The walk finds every example, the launchers and the GPU ones included."""
    files = {e.path.relative_to(EXAMPLES).as_posix() for e in ALL}
    assert {
        "gpu-job.yaml",
        "gang-job.yaml",
        "cpu-job.yaml",
        "launchers/torchrun-bare.yaml",
    } <= files


# torchrun's options that take no value (every other one given without `=` takes the next word).
TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path"}
TORCHRUN_FLAGS |= {"--use_env", "--use-env"}  # torch.distributed.launch's
LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


def script_of(argv: list[str]) -> str | None:
    """The script file a container's command runs, or None where it runs code given inline
    (`python -c`, `sh -c`) or a module. Raises on a command this reader does not know."""
    words = list(argv)
    if words[:2] == ["ddp-wait", "--"]:  # the trainer image's entrypoint, written out
        words = words[2:]
    if not words:
        raise ValueError("no command")
    program, rest = posixpath.basename(words[0]), words[1:]
    if program in ("sh", "bash"):
        return None if rest[:1] == ["-c"] else rest[0]
    if re.fullmatch(r"python3?(\.\d+)?", program):
        if rest[:1] == ["-c"]:
            return None
        if rest[:1] == ["-m"]:
            if rest[1] not in LAUNCHER_MODULES:
                return None
            rest = rest[2:]
        elif rest[0].startswith("-"):
            raise ValueError(f"python option {rest[0]} not understood here")
        else:
            return rest[0]
    elif program != "torchrun":
        raise ValueError(f"{program}: a command this test does not know how to read")
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        word = rest[i]
        if word in ("-m", "--module"):
            return None
        i += 1 if ("=" in word or word in TORCHRUN_FLAGS) else 2
    return rest[i]


def trainer_image_files() -> tuple[str, list[tuple[str, str]]]:
    """The trainer image's WORKDIR and its (repository source, image destination) COPYs."""
    workdir, copies = "/", []
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["WORKDIR"]:
            workdir = words[1]
        elif words[:1] == ["COPY"]:
            src, dst = [w for w in words[1:] if not w.startswith("--")]
            copies.append((src, dst))
    return workdir, copies


def in_trainer_image(path: str) -> Path | None:
    """The repository file the trainer image holds at ``path`` (resolved against its WORKDIR),
    or None if no COPY puts one there."""
    workdir, copies = trainer_image_files()
    where = posixpath.normpath(posixpath.join(workdir, path))
    for src, dst in copies:
        if src.endswith("/") and where.startswith(dst):
            return ROOT / src / where.removeprefix(dst)
        if where == dst:
            return ROOT / src
    return None


def from_configmap(example: Example, path: str) -> tuple[str, str]:
    """(ConfigMap, key) of the file the built pod's trainer sees at ``path``; fails the test
    where no mount of a ConfigMap of the example's own file puts one there."""
    assert posixpath.isabs(path), f"{example.name}: {path} is relative in an image we cannot read"
    mounts = [
        m
        for m in example.trainer.get("volumeMounts") or []
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"{example.name}: nothing is mounted at {path}, and its image has no such file"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volumes = {v["name"]: v for v in example.pod["spec"].get("volumes") or []}
    source = volumes[mount["name"]].get("configMap")
    assert source, f"{example.name}: {mount['mountPath']} is not a ConfigMap's volume"
    name = source["name"]
    assert name in example.configmaps, f"{example.name}: ConfigMap {name} is not in the file"
    if "subPath" in mount:
        key = mount["subPath"]
    else:
        key = posixpath.relpath(path, mount["mountPath"])
        items = {i["path"]: i["key"] for i in source.get("items") or []}
        if items:
            key = items.get(key, "")
    assert key in example.configmaps[name], f"{example.name}: ConfigMap {name} has no key {key!r}"
    return name, key


def test_the_script_each_example_runs_exists_where_its_pod_runs_it() -> None:
    checked: dict[str, str] = {}
    missing: list[str] = []
    for example in ALL:
        trainer = example.trainer
        argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
        script = script_of(argv)
        if script is None:
            continue  # code given inline: the manifest holds it
        assert "$(" not in script, f"{example.name}: {script} depends on the env"
        image = trainer["image"]
        if TRAINER_IMAGE.match(image) and not posixpath.isabs(script):
            held = in_trainer_image(script)
            assert held, f"{example.name}: the trainer image copies nothing to {script}"
            assert held.is_file(), f"{example.name}: {held.relative_to(ROOT)} does not exist"
            checked[example.name] = "trainer image"
        else:
            try:
                name, key = from_configmap(example, script)
            except AssertionError as exc:
                missing.append(str(exc).splitlines()[0])
                continue
            checked[example.name] = f"ConfigMap {name}[{key}]"
    assert not missing, "\n".join(missing)
    assert {"examples/gpu-job.yaml:gpu-ddp", "examples/launchers/mp-spawn.yaml:mp-spawn"} <= set(
        checked
    ), checked


def test_script_of_reads_each_launch_style() -> None:
    assert script_of(["torchrun", "/opt/x/train.py", "--epochs", "3"]) == "/opt/x/train.py"
    assert script_of(["torchrun", "--nproc-per-node", "8", "--standalone", "t.py"]) == "t.py"
    assert script_of(["torchrun", "--rdzv_backend=c10d", "a.py"]) == "a.py"
    assert script_of(["ddp-wait", "--", "torchrun", "a.py"]) == "a.py"
    assert script_of(["python", "-m", "torch.distributed.launch", "--use_env", "b.py"]) == "b.py"
    assert script_of(["python3", "c.py"]) == "c.py" and script_of(["sh", "p.sh"]) == "p.sh"
    assert script_of(["python", "-c", "print(1)"]) is None and script_of(["sh", "-c", "x"]) is None
    with pytest.raises(ValueError, match="accelerate: a command this test does not know"):
        script_of(["accelerate", "launch", "t.py"])


def torch_of(image: str) -> tuple[int, int] | None:
    """The torch release an image's tag guarantees, or None for an image not read here."""
    if found := NGC_IMAGE.match(image):
        release = found.group(1)
        assert release in NGC_TORCH, f"{image}: add NGC {release}'s torch from its release notes"
        return guaranteed(NGC_TORCH[release])
    if found := PYTORCH_IMAGE.match(image):
        return guaranteed(found.group(1))
    return None


def guaranteed(version: str) -> tuple[int, int]:
    """The torch release whose features a build of ``version`` holds: X.Y for a release,
    X.(Y-1) for a pre-release of X.Y (NGC's `X.Y.0a0`)."""
    major, minor, patch = re.fullmatch(r"(\d+)\.(\d+)\.(\d+\w*)", version).groups()  # type: ignore[union-attr]
    return (int(major), int(minor) - (0 if patch.isdigit() else 1))


def test_torch_of_reads_the_tags() -> None:
    assert torch_of("nvcr.io/nvidia/pytorch:26.05-py3") == (2, 11)  # 2.12.0a0
    assert torch_of("nvcr.io/nvidia/pytorch:26.02-py3") == (2, 10)  # 2.11.0a0: not all of 2.11
    assert torch_of("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime") == (2, 5)
    assert torch_of("ddp-operator/trainer:cpu") is None


def test_the_docs_state_the_torch_minimums_this_file_holds_images_to() -> None:
    for path, words in DOCS_TORCH_MINIMUMS.values():
        assert re.search(words, (ROOT / path).read_text()), f"{path} no longer says {words!r}"


def test_every_pytorch_image_of_the_examples_has_the_torch_the_docs_need() -> None:
    images = {e.trainer["image"]: e.name for e in ALL}
    read = 0
    for image, where in images.items():
        if TRAINER_IMAGE.match(image) or image in OTHER_IMAGES:
            continue
        torch = torch_of(image)
        assert torch is not None, f"{where}: {image}: an image whose torch this test cannot read"
        assert torch >= TORCH_MINIMUM, (
            f"{where}: {image} holds torch {torch}, under {TORCH_MINIMUM}"
        )
        read += 1
    assert read >= 1


def configmap_scripts() -> list[tuple[Example, str, str]]:
    """(example, script path, script text) of each ConfigMap-delivered Python script."""
    found = []
    for example in ALL:
        trainer = example.trainer
        script = script_of([*(trainer.get("command") or []), *(trainer.get("args") or [])])
        if script and script.endswith(".py") and not TRAINER_IMAGE.match(trainer["image"]):
            try:
                name, key = from_configmap(example, script)
            except AssertionError:
                continue  # no such script: test_the_script_each_example_runs_... says so
            found.append((example, script, example.configmaps[name][key]))
    return found


def script_in(file: str) -> tuple[str, list[str]]:
    """The text of the ConfigMap script an example file's job runs, and the arguments its
    command gives it."""
    for example, script, text in configmap_scripts():
        if example.path.relative_to(EXAMPLES).as_posix() == file:
            trainer = example.trainer
            argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
            return text, argv[argv.index(script) + 1 :]
    raise AssertionError(f"examples/{file} runs no script of its own ConfigMap")


def run_on_cpu(tmp_path: Path, text: str, args: list[str]) -> tuple[int, str]:
    """The script under torchrun, two processes on this machine's CPU (gloo), with the env a
    GPU pod's torchrun gives it (its backend aside): exit status and output."""
    script = tmp_path / "script.py"
    script.write_text(text)
    env = {**os.environ, "DDP_BACKEND": "gloo", "NODE_NAME": "node-a"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    run = subprocess.run(
        [*torchrun, "--nproc-per-node", "2", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return run.returncode, run.stdout + run.stderr


def test_the_gpu_examples_share_one_training_script() -> None:
    """gpu-job, gang-job and ascend-job bring the same script: a fix reaches all three."""
    texts = {script_in(file)[0] for file in ("gpu-job.yaml", "gang-job.yaml", "ascend-job.yaml")}
    assert len(texts) == 1


@pytest.mark.torch
def test_the_gpu_examples_script_trains(tmp_path: Path) -> None:
    text, args = script_in("gpu-job.yaml")
    status, out = run_on_cpu(tmp_path, text, args)
    assert status == 0, out
    assert re.findall(r"TRAINED rank \d/2 on node-a cpu: w=3\.0\d\d b=-2\.0\d\d", out), out
    assert out.count("TRAINED rank") == 2, out


SMALL = ["--size-mb", "4", "--iters", "3"]  # the smoke test's sizes for two CPU processes


@pytest.mark.torch
def test_the_nccl_smoke_test_reports_bandwidth_and_passes(tmp_path: Path) -> None:
    text, args = script_in("gpu/nccl-smoke.yaml")
    status, out = run_on_cpu(tmp_path, text, [*args, *SMALL, "--min-nodes", "1"])
    assert status == 0, out
    assert len(re.findall(r"all_reduce ok, 4 MiB in .* busbw [\d.]+ GB/s", out)) == 2, out
    assert "NCCL SMOKE OK (2 ranks on 1 node(s)" in out, out


@pytest.mark.torch
def test_the_nccl_smoke_test_fails_where_the_ranks_share_one_node(tmp_path: Path) -> None:
    text, args = script_in("gpu/nccl-smoke.yaml")
    status, out = run_on_cpu(tmp_path, text, [*args, *SMALL])  # the example's --min-nodes: 2
    assert status != 0 and re.search(r"exitcode\s*: 2", out), out  # torchrun's word on its ranks
    assert "the ranks ran on 1 node(s), under --min-nodes 2" in out, out


@pytest.mark.torch
def test_the_nccl_smoke_test_fails_under_its_bandwidth_floor(tmp_path: Path) -> None:
    text, args = script_in("gpu/nccl-smoke.yaml")
    floor = ["--min-nodes", "1", "--min-busbw", "1e6"]
    status, out = run_on_cpu(tmp_path, text, [*args, *SMALL, *floor])
    assert status != 0 and re.search(r"exitcode\s*: 3", out), out
    assert "under --min-busbw 1000000.0" in out, out


@pytest.mark.torch
def test_the_nccl_smoke_test_counts_a_wrong_sum(tmp_path: Path) -> None:
    import torch

    smoke: dict[str, Any] = {"__name__": "smoke"}  # the script imported, its main not run
    exec(compile(script_in("gpu/nccl-smoke.yaml")[0], "nccl_smoke.py", "exec"), smoke)
    world = 16
    right = torch.full((1024,), float(world * (world + 1) // 2))
    assert smoke["wrong_elements"](right, world) == 0
    right[7] += 1
    assert smoke["wrong_elements"](right, world) == 1
