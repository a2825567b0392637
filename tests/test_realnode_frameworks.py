"""Progress with no code change, on the real node: a Hugging Face Trainer (transformers'
KubeflowCallback) and a Lightning script (the trainer image's callback, an entry point) report
their steps to the job."""

from __future__ import annotations

from typing import Any

import pytest

from harness import jobs, pylibs
from harness.cluster import Cluster, wait_for
from harness.realnode import trainer_job
from harness.reporting import Reporting, worker_log

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.timeout(1200)]


def run_framework_script(
    cluster: Cluster, ns: str, name: str, image: str, lib: Any, script: str, *env: dict
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A 1-worker job running ``script`` with the libraries of ``lib`` (a host folder, mounted at
    /opt/lib) on its path, to its end: its status, the progress it showed on the way, its log."""
    args = ["sh", "-c", 'printf "%s" "$SCRIPT" > /tmp/t.py && exec python3 /tmp/t.py']
    job = trainer_job(name, ns, image, args, procsPerNode=1)
    job["spec"]["nodes"] = 1
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "lib", "hostPath": {"path": str(lib), "type": "Directory"}}]
    trainer = spec["containers"][0]
    trainer["volumeMounts"] = [{"name": "lib", "mountPath": "/opt/lib", "readOnly": True}]
    trainer["env"] = [
        {"name": "SCRIPT", "value": script},
        {"name": "PYTHONPATH", "value": "/opt/lib:/opt/ddp-operator"},
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

    wait_for(finished, timeout=300, interval=0.3, what=f"job {name} to finish")
    status = (jobs.get(cluster, ns, name) or {})["status"]
    return status, seen, worker_log(cluster, ns, f"{name}-worker-0")


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
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """A Hugging Face ``Trainer`` script (a tiny GPT-2 built here, no download) that never
    imports ddp_operator, with ``report_to="none"``: transformers' own KubeflowCallback finds
    the Kubeflow Trainer variables the operator gives the pod and posts Kubeflow's status
    updates, which the job shows as progress: its step of 40, ETA and loss on the way, 100% at
    the end."""
    ns, name = reporting.ns, "hugging-face"
    offline = {"name": "HF_HUB_OFFLINE", "value": "1"}
    status, seen, log = run_framework_script(
        cluster, ns, name, images["trainer"], pylibs.transformers(), HUGGING_FACE, offline
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
    cluster: Cluster, reporting: Reporting, images: dict[str, str]
) -> None:
    """A PyTorch Lightning script that never imports ddp_operator: Lightning adds the image's
    callback by itself (the entry point ``lightning.pytorch.callbacks_factory`` the trainer
    image declares), which reports each step (of 40) with its loss, and the checkpoints its
    ModelCheckpoint writes."""
    ns, name = reporting.ns, "lightning"
    interval = {"name": "DDP_PROGRESS_INTERVAL", "value": "1"}
    status, seen, log = run_framework_script(
        cluster, ns, name, images["trainer"], pylibs.lightning(), LIGHTNING, interval
    )
    assert status["phase"] == "Succeeded" and "TRAINED" in log, (status, log[-3000:])
    last = status["progress"]
    assert (last["step"], last["total"], last["percent"]) == (40, 40, 100.0), last
    assert "loss" in last["metrics"], last
    assert [p for p in seen if 0 < p["step"] < 40], seen
    mark = status.get("checkpoint") or {}
    assert mark.get("path", "").startswith("/tmp/ckpt/") and mark.get("step", 0) >= 10, status
