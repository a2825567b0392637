"""Progress with no code change, on the real node: a Hugging Face Trainer (transformers'
KubeflowCallback) and a Lightning script (the operator's delivered callback, an entry point),
in Debian's Python image with nothing of the project, report their steps to the job; a resumed
Trainer is timed from its first real step, and neither a Trainer's evaluation nor a Lightning
validation longer than the stall timeout is a hang."""

from __future__ import annotations

from typing import Any

import pytest

from harness import jobs, pylibs
from harness.cluster import Cluster, wait_for
from harness.realnode import trainer_job
from harness.reporting import Reporting, worker_log

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1200)]


def run_framework_script(
    cluster: Cluster,
    ns: str,
    name: str,
    image: str,
    lib: Any,
    script: str,
    *env: dict,
    ckpt: bool = False,
    **spec_fields: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A 1-worker job running ``script`` with the libraries of ``lib`` (a host folder, mounted at
    /opt/lib, on the template's own PYTHONPATH: the operator's delivered helpers come first,
    this checkout's as its operator image holds them) to its end: its status, the progress it
    showed on the way, its log. ``ckpt``: an emptyDir at /ckpt (kept across an in-place
    restart); ``spec_fields``: the job's own."""
    args = ["sh", "-c", 'printf "%s" "$SCRIPT" > /tmp/t.py && exec python3 /tmp/t.py']
    job = trainer_job(name, ns, image, args, procsPerNode=1, **spec_fields)
    job["spec"]["nodes"] = 1
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "lib", "hostPath": {"path": str(lib), "type": "Directory"}}]
    trainer = spec["containers"][0]
    trainer["volumeMounts"] = [{"name": "lib", "mountPath": "/opt/lib", "readOnly": True}]
    if ckpt:
        spec["volumes"].append({"name": "ckpt", "emptyDir": {}})
        trainer["volumeMounts"].append({"name": "ckpt", "mountPath": "/ckpt"})
    trainer["env"] = [
        {"name": "SCRIPT", "value": script},
        {"name": "PYTHONPATH", "value": "/opt/lib"},
        # One thread for torch's operations, as torchrun gives each worker: accelerate would set
        # two, whose OpenMP thread spins a core between the script's small operations.
        {"name": "OMP_NUM_THREADS", "value": "1"},
        *env,
    ]
    jobs.apply(cluster, job)
    seen: list[dict[str, Any]] = []

    def finished() -> bool:
        j = jobs.get(cluster, ns, name) or {}
        p = (j.get("status") or {}).get("progress") or {}
        if p and (not seen or seen[-1].get("updated") != p.get("updated")):
            seen.append(p)
        return (j.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    try:
        wait_for(finished, timeout=300, interval=0.3, what=f"job {name} to finish")
    except AssertionError as late:
        steps = [(p.get("attempt"), p.get("step")) for p in seen]
        said = f"{late}\n{jobs.record(cluster, ns, name)}\nsteps seen: {steps}"
        raise AssertionError(f"{said}\n{_log_tail(cluster, ns, f'{name}-worker-0')}") from None
    status = (jobs.get(cluster, ns, name) or {})["status"]
    return status, seen, worker_log(cluster, ns, f"{name}-worker-0")


def _log_tail(cluster: Cluster, ns: str, pod: str, lines: int = 30) -> str:
    """The last lines of a pod's trainer log, or why it cannot be read (for a failure)."""
    try:
        tail = worker_log(cluster, ns, pod).splitlines()[-lines:]
    except Exception as exc:  # what a failure says: it cannot hide the failure itself
        return f"its trainer's log cannot be read: {exc}"
    return "\n".join(["its trainer's log, last lines:", *tail])


HUGGING_FACE = """
import time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

class Pace(TrainerCallback):  # a real model's step takes time (no progress code here)
    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(0.3)

torch.manual_seed(0)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
rows = torch.randint(0, 64, (64, 16))
data = [{"input_ids": row, "labels": row} for row in rows]
args = TrainingArguments(output_dir="/tmp/out", max_steps=40, per_device_train_batch_size=4,
    logging_steps=5, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True)
Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data, callbacks=[Pace()]).train()
print("TRAINED", flush=True)
"""


def test_a_hugging_face_trainer_reports_with_no_code_change(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str]
) -> None:
    """A Hugging Face ``Trainer`` script (a tiny GPT-2 built here, no download) that never
    imports ddp_operator, with ``report_to="none"``: transformers' own KubeflowCallback finds
    the Kubeflow Trainer variables the operator gives the pod and posts Kubeflow's status
    updates, which the job shows as progress: its step of 40, ETA and loss on the way, 100% at
    the end."""
    ns, name = reporting.ns, "hugging-face"
    offline = {"name": "HF_HUB_OFFLINE", "value": "1"}
    status, seen, log = run_framework_script(
        cluster,
        ns,
        name,
        foreign_images["debian-torch"],
        pylibs.transformers(),
        HUGGING_FACE,
        offline,
    )
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    last = status["progress"]
    assert (last["step"], last["total"], last["percent"], last["attempt"]) == (40, 40, 100.0, 0)
    assert last["etaSeconds"] == 0 and "loss" in last["metrics"], last
    during = [p for p in seen if 0 < p["step"] < 40]
    assert during and "etaSeconds" in during[0], seen
    # The callback sends the loss from the step after its first logging step (5) on: an update
    # at step 5 itself, seen first under load, has none yet.
    assert any("loss" in p["metrics"] for p in during), seen
    assert "ddp progress" not in log, log  # the script has no reporter of ours


LIGHTNING = """
import time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(0.2)  # a real model's step takes time (no progress code here)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
saver = pl.callbacks.ModelCheckpoint(dirpath="/tmp/ckpt", every_n_train_steps=10, save_last=True)
trainer = pl.Trainer(max_steps=40, accelerator="cpu", devices=1, logger=False,
    enable_progress_bar=False, callbacks=[saver])
trainer.fit(Tiny(), DataLoader(data, batch_size=4))
print("TRAINED", flush=True)
"""


def test_a_lightning_script_reports_with_no_code_change(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str]
) -> None:
    """A PyTorch Lightning script that never imports ddp_operator: Lightning adds the image's
    callback by itself (the entry point ``lightning.pytorch.callbacks_factory`` the trainer
    image declares), which reports each step (of 40) with its loss, and the checkpoints its
    ModelCheckpoint writes."""
    ns, name = reporting.ns, "lightning"
    interval = {"name": "DDP_PROGRESS_INTERVAL", "value": "1"}
    status, seen, log = run_framework_script(
        cluster, ns, name, foreign_images["debian-torch"], pylibs.lightning(), LIGHTNING, interval
    )
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    last = status["progress"]
    assert (last["step"], last["total"], last["percent"]) == (40, 40, 100.0), last
    assert "loss" in last["metrics"], last
    assert [p for p in seen if 0 < p["step"] < 40], seen
    mark = status.get("checkpoint") or {}
    assert mark.get("path", "").startswith("/tmp/ckpt/") and mark.get("step", 0) >= 10, status


HUGGING_FACE_RESUMED = """
import os
import time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

torch.set_num_threads(1)
attempt = int(os.environ["DDP_ATTEMPT"])
work = torch.randn(64, 64)


def compute(seconds):  # a model's work: a quarter of a core, five times what counts as quiet
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        burst = time.monotonic() + 0.025
        while time.monotonic() < burst:
            work @ work
        time.sleep(0.075)


class Script(TrainerCallback):  # no progress code: what a real script's steps would take
    def on_step_end(self, args, state, control, **kwargs):
        if attempt > 0:  # the resumed attempt's steps are slow (2 s), and compute
            compute(0.5)
            time.sleep(1.5)

    def on_save(self, args, state, control, **kwargs):
        if attempt == 0:  # a failure just after the checkpoint of step 20: resumed there
            print("FAILING at step", state.global_step, flush=True)
            os._exit(3)

    def on_evaluate(self, args, state, control, **kwargs):
        print("EVALUATING at step", state.global_step, flush=True)
        compute(45)  # an evaluation past the stall timeout (30 s), computing


torch.manual_seed(0)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
rows = torch.randint(0, 64, (160, 16))
data = [{"input_ids": row, "labels": row} for row in rows]
args = TrainingArguments(output_dir="/ckpt/out", max_steps=30, per_device_train_batch_size=4,
    per_device_eval_batch_size=4, logging_steps=5, report_to="none", use_cpu=True,
    save_strategy="steps", save_steps=20, eval_strategy="steps", eval_steps=25, disable_tqdm=True)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data,
    eval_dataset=data[:8], callbacks=[Script()])
trainer.train(resume_from_checkpoint=attempt > 0)
print("TRAINED", flush=True)
"""


def restart_record(
    cluster: Cluster, ns: str, name: str, status: dict[str, Any], seen: list[dict[str, Any]]
) -> str:
    """Why a job restarted more than it asked for, in a few lines: the job and its pods
    (``jobs.record``: the time between two restarts is how long an attempt ran), the steps it
    showed by attempt, and its first failure."""
    return "\n".join(
        [
            jobs.record(cluster, ns, name),
            f"steps seen (attempt, step): {[(p.get('attempt'), p.get('step')) for p in seen]}",
            f"firstFailure: {status.get('firstFailure')}",
        ]
    )


def test_a_resumed_hugging_face_trainer_is_timed_from_its_first_step_and_may_evaluate(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str]
) -> None:
    """Issue 68, items 3 and 4, in one job (stall timeout 30 s). Attempt 0 fails after its
    checkpoint of step 20; attempt 1 resumes there (``resume_from_checkpoint``), its steps 2 s
    each. KubeflowCallback's first post of the attempt (progress 0, the total only) is no step:
    the attempt's step interval opens at its first real step, past 20, not at a step 0 (which
    made a resumed job's seconds per step 1/500 of the real ones). At step 25 the Trainer
    evaluates for 45 s, computing, with no post (the callback posts at step ends only): its
    processes compute, so it is no stall. The job succeeds after the one restart it asked for."""
    ns, name = reporting.ns, "hf-resumed"
    offline = {"name": "HF_HUB_OFFLINE", "value": "1"}
    stall = {"timeoutSeconds": 30}
    status, seen, log = run_framework_script(
        cluster, ns, name, foreign_images["debian-torch"], pylibs.transformers(),
        HUGGING_FACE_RESUMED, offline, ckpt=True, stallDetection=stall,
    )  # fmt: skip
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    assert "EVALUATING at step 25" in log, log[-3000:]
    first = status.get("firstFailure") or {}
    restarted = (status["restarts"], first.get("attempt"), first.get("exitCode"))
    assert restarted == (1, 0, 3), restart_record(cluster, ns, name, status, seen)
    last = status["progress"]
    assert (last["attempt"], last["step"], last["total"]) == (1, 30, 30), last
    assert last["protocol"] == "kubeflow", last  # on the status: judged so after a restart too
    assert 20 < last["sinceStep"] < 30, last  # the resumed attempt's first real step
    timed = [p["stepSeconds"] for p in seen if p.get("attempt") == 1 and "stepSeconds" in p]
    assert timed and min(timed) >= 1.5, seen  # each of its steps took 2 s


LIGHTNING_VALIDATES = """
import time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(0.2)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        if not self.trainer.sanity_checking:
            time.sleep(22)  # 2 batches: a validation of 44 s, past the stall timeout (30 s)
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
saver = pl.callbacks.ModelCheckpoint(dirpath="/ckpt", every_n_train_steps=5)
trainer = pl.Trainer(max_steps=14, accelerator="cpu", devices=1, logger=False,
    enable_progress_bar=False, callbacks=[saver], val_check_interval=10, limit_val_batches=2,
    num_sanity_val_steps=1)
trainer.fit(Tiny(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
print("TRAINED", flush=True)
"""


def test_a_lightning_validation_longer_than_the_stall_timeout_is_no_hang(
    cluster: Cluster, reporting: Reporting, foreign_images: dict[str, str]
) -> None:
    """Issue 68, item 4: the callback reports Lightning's sanity check, validation and checkpoint
    saves as phases (this checkout's ``lightning_progress``, mounted ahead of the image's). A
    validation of 44 s, asleep, against a stall timeout of 30 s: the job shows it in phase
    ``validation`` and succeeds with no restart; the phase ends with it."""
    ns, name = reporting.ns, "lightning-validates"
    interval = {"name": "DDP_PROGRESS_INTERVAL", "value": "1"}
    status, seen, log = run_framework_script(
        cluster, ns, name, foreign_images["debian-torch"], pylibs.lightning(),
        LIGHTNING_VALIDATES, interval, ckpt=True, stallDetection={"timeoutSeconds": 30},
    )  # fmt: skip
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    assert status["restarts"] == 0 and not status.get("firstFailure"), status
    phases = [p.get("phase") for p in seen]
    assert "validation" in phases, seen
    validating = next(p for p in seen if p.get("phase") == "validation")
    assert validating["step"] == 10 and "loss" in validating["metrics"], validating
    last = status["progress"]
    assert (last["step"], last["total"], "phase" in last) == (14, 14, False), last
