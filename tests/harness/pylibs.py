"""Python libraries a test's pods import that the trainer image does not carry (Hugging Face
transformers and its accelerate, for the Kubeflow-protocol test; PyTorch Lightning): installed
once from PyPI into a folder of the build cache (``pip install --target``, keyed by their
versions), which the pods mount from the real node (this machine) read-only. The image stays
as it is: torch, and no trainer framework.

``helpers`` is this checkout's own copy of what the image carries under ``/opt/ddp-operator``
(``progress.py``, ``progress_stacks.py``, ``lightning_progress.py``: a namespace package, as
there): put ahead of it on a pod's ``PYTHONPATH``, a test runs the modules as they are now,
whether or not the node's image was built from them."""

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
    if missing (one build at a time; a half-built folder is never used)."""
    key = "-".join(p.replace("==", "-") for p in (*with_deps, *no_deps))
    done = CACHE / f"{name}-py{sys.version_info.major}{sys.version_info.minor}-{key}"
    if done.is_dir():
        return done
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_dir():
            return done
        work = done.with_name(done.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", str(work)]
        if with_deps:
            subprocess.run([*pip, *with_deps], check=True, timeout=900)
        if no_deps:
            subprocess.run([*pip, "--no-deps", *no_deps], check=True, timeout=900)
        work.rename(done)
    return done


def transformers() -> Path:
    """Hugging Face transformers with its Trainer's accelerate, torch left to the image."""
    return folder("hf", TRANSFORMERS, ACCELERATE)


def lightning() -> Path:
    """PyTorch Lightning, torch left to the image."""
    return folder("lightning", (), LIGHTNING)


HELPERS = ("progress.py", "progress_stacks.py", "lightning_progress.py")
SOURCE = Path(__file__).resolve().parents[2] / "operator" / "ddp_operator"


def helpers() -> Path:
    """A folder holding ``ddp_operator/`` with this checkout's HELPERS (keyed by their content),
    for a pod to mount and put first on its ``PYTHONPATH``."""
    texts = {name: (SOURCE / name).read_bytes() for name in HELPERS}
    key = hashlib.sha256(b"".join(texts[n] for n in HELPERS)).hexdigest()[:12]
    done = CACHE / f"helpers-{key}"
    if done.is_dir():
        return done
    work = CACHE / f"helpers-{key}.{os.getpid()}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    (work / "ddp_operator").mkdir(parents=True)
    for name, text in texts.items():
        (work / "ddp_operator" / name).write_bytes(text)
    work.chmod(0o755)
    try:
        work.rename(done)
    except OSError:  # another process made it first: the same files
        shutil.rmtree(work, ignore_errors=True)
    return done
