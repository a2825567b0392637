"""Python libraries a test's pods import that the trainer image does not carry (Hugging Face
transformers and its accelerate, for the Kubeflow-protocol test; PyTorch Lightning): installed
once from PyPI into a folder of the build cache (``pip install --target``, keyed by their
versions), which the pods mount from the real node (this machine) read-only. The image stays
as it is: torch, and no trainer framework.

``helpers`` is this checkout's own copy of the helpers the operator delivers to every worker
(``manifests/helpers_pod.py``: ``helpers/`` and ddp_operator's MODULES, as the operator's image
holds them), for processes on this machine to put first on their ``PYTHONPATH``, as a worker
does."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("DDP_CACHE", Path.home() / ".cache" / "ddp-operator")) / "pylibs"
# The trainer image's Python is 3.11, as the test venv's: the wheels fit both.
TRANSFORMERS = ("transformers==5.24.0",)  # KubeflowCallback: transformers 5.4 and later
ACCELERATE = ("accelerate==1.13.0", "psutil==7.2.2")  # the Trainer's; its torch is the image's
COMPILED = ".compiled"  # in a folder whose modules are compiled (``compiled``)
LIGHTNING = (  # each alone: their torch is the image's
    "lightning==2.6.6",
    "lightning-utilities==0.15.3",
    "torchmetrics==1.9.0",
    "fsspec==2026.9.0",
    "tqdm==4.70.1",
    "pyyaml==6.0.4",
    "packaging==26.4",
    "typing-extensions==4.16.0",
)


def folder(name: str, with_deps: tuple[str, ...], no_deps: tuple[str, ...] = ()) -> Path:
    """The folder holding ``with_deps`` (and their dependencies) and ``no_deps`` (alone), built
    if missing (one build at a time; a half-built folder is never used), and compiled
    (``compiled``)."""
    key = "-".join(p.replace("==", "-") for p in (*with_deps, *no_deps))
    done = CACHE / f"{name}-py{sys.version_info.major}{sys.version_info.minor}-{key}"
    if (done / COMPILED).exists():
        return done
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            work = done.with_name(done.name + ".tmp")
            shutil.rmtree(work, ignore_errors=True)
            pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(work)]
            if with_deps:
                subprocess.run([*pip, *with_deps], check=True, timeout=900)
            if no_deps:
                subprocess.run([*pip, "--no-deps", *no_deps], check=True, timeout=900)
            work.rename(done)
        compiled(done)
    return done


def compiled(lib: Path) -> None:
    """Compile every module of ``lib`` once, then mark it (COMPILED). The pods mount it
    read-only, where Python cannot write what it compiles: a module without its ``.pyc`` is
    compiled again at each import, in each process (transformers' Trainer, thousands of
    lines). The pods' Python is this one's version (3.11), so they read these. Exit code 1 is a
    file that does not compile, which nothing imports (a package's templates); any other fails."""
    if (lib / COMPILED).exists():
        return
    cmd = [sys.executable, "-m", "compileall", "-q", "-j", "0", str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"compileall {lib}: exit {done.returncode}: {done.stderr[-2000:]}")
    (lib / COMPILED).touch()


def transformers() -> Path:
    """Hugging Face transformers with its Trainer's accelerate, torch left to the image."""
    return folder("hf", TRANSFORMERS, ACCELERATE)


def lightning() -> Path:
    """PyTorch Lightning, torch left to the image."""
    return folder("lightning", (), LIGHTNING)


ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "operator" / "ddp_operator"


def helpers() -> Path:
    """A folder holding what the operator's image holds at ``helpers_pod.HELPERS_SOURCE`` (this
    checkout's, keyed by their content)."""
    from ddp_operator.manifests.helpers_pod import MODULES

    files = {
        p.relative_to(ROOT / "helpers"): p
        for p in (ROOT / "helpers").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    files |= {Path("ddp_operator") / name: SOURCE / name for name in MODULES}
    texts = {rel: files[rel].read_bytes() for rel in sorted(files)}
    key = hashlib.sha256(b"".join(str(r).encode() + t for r, t in texts.items())).hexdigest()[:12]
    done = CACHE / f"helpers-{key}"
    if done.is_dir():
        return done
    work = CACHE / f"helpers-{key}.{os.getpid()}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    for rel, text in texts.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(text)
    work.chmod(0o755)
    try:
        work.rename(done)
    except OSError:  # another process made it first: the same files
        shutil.rmtree(work, ignore_errors=True)
    return done
