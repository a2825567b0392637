"""The helpers as a worker's Python processes meet them (first on ``PYTHONPATH``, as the
operator delivers them), in real interpreters of this machine: the image's own
``sitecustomize`` still runs (and its errors are still reported), nothing is printed, a process
outside a DDPJob or one that is not a rank is left alone, an installed ``ddp_operator`` is the
one imported, and the delivered code parses as Python 3.9 to 3.13."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import pylibs

# The interpreter behind the test's virtualenv: Python as an image has it, without this project.
PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")
WORKER_ENV = {"DDP_PROGRESS_URL": "http://127.0.0.1:9/v1/namespaces/n/ddpjobs/j/progress"}


def run(code: str, path: list[Path | str], **env: str) -> subprocess.CompletedProcess:
    """``python -c code`` with ``path`` as its PYTHONPATH and nothing of the test's own."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_", "PYTHON"))}
    return subprocess.run(
        [PYTHON, "-c", code],
        env={**clean, "PYTHONPATH": os.pathsep.join(map(str, path)), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def image_site(tmp_path: Path) -> Path:
    """A folder standing for an image's own site: its sitecustomize leaves a mark."""
    site = tmp_path / "image"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITE_RAN = True\n")
    return site


def test_the_image_s_own_sitecustomize_still_runs_and_nothing_is_printed(image_site: Path) -> None:
    code = (
        "import builtins, sys, threading\n"
        "print(getattr(builtins, 'IMAGE_SITE_RAN', False), sys.modules['sitecustomize'].__file__)\n"
        "print(sorted(t.name for t in threading.enumerate()))"
    )
    done = run(code, [pylibs.helpers(), image_site], **WORKER_ENV)
    assert done.returncode == 0 and done.stderr == ""
    ran, module = done.stdout.splitlines()[0].split(" ", 1)
    assert ran == "True" and module == str(image_site / "sitecustomize.py")
    assert "'ddp-stack'" in done.stdout.splitlines()[1]  # the watch (progress_stacks)


def test_outside_a_ddpjob_no_watch_starts(image_site: Path) -> None:
    code = "import sys, threading; print(threading.active_count(), 'urllib.request' in sys.modules)"
    done = run(code, [pylibs.helpers(), image_site])
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, ["1", "False"], "")


def test_an_error_in_the_image_s_sitecustomize_is_reported_as_python_reports_it(
    tmp_path: Path,
) -> None:
    site = tmp_path / "broken"
    site.mkdir()
    (site / "sitecustomize.py").write_text("raise RuntimeError('the image is broken')\n")
    without = run("print('ran')", [site])
    with_helpers = run("print('ran')", [pylibs.helpers(), site], **WORKER_ENV)
    assert without.stdout == with_helpers.stdout == "ran\n"
    assert "Error in sitecustomize" in without.stderr
    assert "the image is broken" in with_helpers.stderr
    assert "Error in sitecustomize" in with_helpers.stderr


def test_pip_and_a_shell_s_python_run_as_without_the_helpers() -> None:
    """A process that is no rank (pip, here) works and says the same with the helpers."""
    args = [PYTHON, "-m", "pip", "--version"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_", "PYTHON"))}
    plain = subprocess.run(args, env=clean, capture_output=True, text=True, timeout=60)
    helped = subprocess.run(
        args,
        env={**clean, **WORKER_ENV, "PYTHONPATH": str(pylibs.helpers())},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (helped.returncode, helped.stdout, helped.stderr) == (0, plain.stdout, plain.stderr)


def test_an_installed_ddp_operator_is_the_one_imported(tmp_path: Path) -> None:
    """A regular ``ddp_operator`` package anywhere on the path wins over the delivered
    namespace portion, which comes first: the image's copy runs, and the Lightning factory
    of the delivery adds nothing beside that copy's own entry point."""
    installed = tmp_path / "site"
    (installed / "ddp_operator").mkdir(parents=True)
    (installed / "ddp_operator" / "__init__.py").write_text("")
    (installed / "ddp_operator" / "progress.py").write_text("WHERE = 'installed'\n")
    meta = installed / "ddp_operator-9.9.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: ddp-operator\nVersion: 9.9\n")
    code = (
        "import ddp_operator.progress as p, ddp_operator_helpers as h\n"
        "print(p.WHERE, h.lightning_callbacks(), h.pytorch_lightning_callbacks())"
    )
    done = run(code, [pylibs.helpers(), installed], **WORKER_ENV)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "installed [] []", "")
    alone = run("import ddp_operator.progress as p; print(p.__file__)", [pylibs.helpers()])
    assert alone.stdout.strip() == str(pylibs.helpers() / "ddp_operator" / "progress.py")


def test_lightning_finds_the_delivered_entry_point() -> None:
    code = (
        "from importlib.metadata import entry_points\n"
        "eps = entry_points()\n"
        "group = eps.select(group='lightning.pytorch.callbacks_factory')\n"
        "print([e.value for e in group if e.name == 'ddp_operator'])"
    )
    done = run(code, [pylibs.helpers()])
    assert "ddp_operator_helpers:lightning_callbacks" in done.stdout, done.stderr


@pytest.mark.parametrize("minor", [9, 10, 11, 12, 13])
def test_the_delivered_code_parses_as_every_python_it_supports(minor: int) -> None:
    for path in sorted(pylibs.helpers().rglob("*.py")):
        ast.parse(path.read_text(), str(path), feature_version=(3, minor))


def test_an_image_that_starts_the_watch_itself_too_still_has_one(image_site: Path) -> None:
    """An image built from the old instructions (its own copy, started by its own ``.pth``)
    starts the watch a second time: one watch runs."""
    code = (
        "import threading, ddp_operator_helpers\n"
        "ddp_operator_helpers.start()\n"
        "print(sum(t.name == 'ddp-stack' for t in threading.enumerate()))"
    )
    done = run(code, [pylibs.helpers(), image_site], **WORKER_ENV)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "1", "")
