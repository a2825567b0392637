"""The Lightning callback (``lightning_progress``) in a real Lightning ``Trainer`` here, as
Lightning adds it by itself (the entry point this repository's install declares), against a
real HTTP endpoint: each training batch's step, and the stretches without steps as phases, each
ended by the report after it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import pylibs
from harness.endpoint import Endpoint

pytestmark = pytest.mark.torch

OPERATOR = Path(__file__).resolve().parents[1] / "operator"

SCRIPT = """
import time
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset
from ddp_operator import progress


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.1)
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        time.sleep(0.3)
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = DataLoader(TensorDataset(torch.randn(48, 4), torch.randn(48, 1)), batch_size=4)
saver = pl.callbacks.ModelCheckpoint(dirpath=CKPT, every_n_train_steps=3)
trainer = pl.Trainer(max_steps=8, accelerator="cpu", devices=1, logger=False,
    enable_progress_bar=False, enable_model_summary=False, callbacks=[saver],
    val_check_interval=6, limit_val_batches=2, num_sanity_val_steps=1)
trainer.fit(Tiny(), data, data)
progress.reporter().flush()
"""


def test_sanity_check_checkpoints_and_validation_are_phases_each_ended_by_the_next_report(
    tmp_path: Path,
) -> None:
    """Issue 68, item 4: the callback reported training batches only, so a validation (or a
    sanity check, or a save) longer than the stall timeout was a hang. Its phases now come in
    the order Lightning runs them: the sanity check (step 0), the save of step 3, the save of
    step 6 then its validation, with the step's loss; a report without a phase after each, and
    the last report (step 8) in none."""
    endpoint = Endpoint()
    env = {
        **os.environ,
        "PYTHONPATH": f"{pylibs.lightning()}{os.pathsep}{OPERATOR}",
        "DDP_PROGRESS_URL": f"http://127.0.0.1:{endpoint.server_address[1]}/progress",
        "DDP_PROGRESS_INTERVAL": "0",
        "RANK": "0",
    }
    script = f"CKPT = {str(tmp_path / 'ckpt')!r}\n{SCRIPT}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    endpoint.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    said = [(g["step"], g.get("phase")) for g in endpoint.got]
    phases = [(step, phase) for step, phase in said if phase]
    # The save of step 6 may be overtaken by its validation before it is sent: either is a phase.
    assert [p for p in phases if p != (6, "checkpoint")] == [
        (0, "sanity_check"),
        (3, "checkpoint"),
        (6, "validation"),
    ], said
    for at in (said.index(p) for p in phases if p != (6, "checkpoint")):
        assert said[at + 1][1] is None, said  # ended by the report after it
    assert said[-1] == (8, None), said
    validating = next(g for g in endpoint.got if g.get("phase") == "validation")
    assert "loss" in validating["metrics"] and validating["total"] == 8, validating
