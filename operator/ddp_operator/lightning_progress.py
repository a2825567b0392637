"""PyTorch Lightning scripts report into their DDPJob with no code change: Lightning adds the
callbacks its entry point group ``lightning.pytorch.callbacks_factory`` (``pytorch_lightning.
callbacks_factory`` for the standalone package) names to every ``Trainer`` by itself, and this
package names ``callbacks`` there (the operator's delivered helpers carry an entry point to
it, ``helpers/ddp_operator_helpers.py``; ``pip install`` of this repository declares it too).

In a DDPJob's pod (``DDP_PROGRESS_URL`` set) the callback reports each training batch's end
(``report``: rank 0, rate-limited): the trainer's global step, of ``max_steps`` or its estimated
stepping batches, with the step's loss and the numeric metrics the module logged (the first 8);
and each checkpoint its ``ModelCheckpoint`` wrote (``checkpoint``: step and path, seen at the
next batch's end or validation, once the file is there). Outside a DDPJob it adds nothing. To
resume where the job says, pass ``ckpt_path=last_checkpoint().path`` to ``fit``.

The stretches without training steps are reported as phases (``report(..., phase=...)``, sent
at once; the hour a phase has without a bound of its own), so that stall detection never takes
them for a hang: ``sanity_check`` (from ``on_sanity_check_start`` to its end), ``validation``
(from ``on_validation_start`` to its end) and ``checkpoint`` (from ``on_save_checkpoint``, as a
checkpoint is being saved). A report without a phase ends one: at the end of the sanity check or
validation, at the next training batch's end (a save has no end hook), at the training's end.
"""

from __future__ import annotations

import math
import os
from typing import Any

from .progress import MAX_METRICS, URL_ENV, checkpoint, report

RESERVED = ("step", "total", "phase", "phase_timeout")  # ``report``'s own arguments: no metrics


def _number(value: Any) -> float | None:
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def _total(trainer: Any) -> int | None:
    if int(getattr(trainer, "max_steps", -1) or -1) > 0:
        return int(trainer.max_steps)
    try:
        estimated = float(trainer.estimated_stepping_batches)
    except Exception:  # (a trainer that cannot tell: no total)
        return None
    return int(estimated) if math.isfinite(estimated) else None


def _make(base: type) -> type:
    """The callback on ``base``, Lightning's ``Callback`` (of either package)."""

    class DDPJobProgress(base):  # type: ignore[misc, valid-type]
        """Reports the training's steps and checkpoints to its DDPJob."""

        def __init__(self) -> None:
            super().__init__()
            self._said: tuple[int, str] | None = None
            self._metrics: dict[str, float] = {}  # the last training batch's
            self._phase: str | None = None

        def _report(self, trainer: Any, phase: str | None) -> None:
            """The step again, with the last metrics, in ``phase`` (None: out of one)."""
            self._phase = phase
            report(int(trainer.global_step), _total(trainer), phase=phase, **self._metrics)

        def _end(self, trainer: Any, phase: str) -> None:
            if self._phase == phase:
                self._report(trainer, None)

        def _checkpointed(self, trainer: Any) -> None:
            saver = getattr(trainer, "checkpoint_callback", None)
            path = getattr(saver, "last_model_path", "") or getattr(saver, "best_model_path", "")
            if not path or not os.path.exists(path):
                return
            step = int(getattr(saver, "_last_global_step_saved", trainer.global_step) or 0)
            if (step, path) != self._said:
                self._said = (step, path)
                checkpoint(step, path)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            metrics: dict[str, float] = {}
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if (value := _number(loss)) is not None:
                metrics["loss"] = value
            for name, logged in dict(getattr(trainer, "callback_metrics", {}) or {}).items():
                if len(metrics) >= MAX_METRICS:
                    break
                key = name.replace("/", "_")
                if key in metrics or key in RESERVED or (value := _number(logged)) is None:
                    continue
                metrics[key] = value
            self._metrics = metrics
            self._report(trainer, None)
            self._checkpointed(trainer)

        def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
            self._report(trainer, "sanity_check")

        def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
            self._end(trainer, "sanity_check")

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            if not getattr(trainer, "sanity_checking", False):  # (its own phase already)
                self._report(trainer, "validation")

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            self._end(trainer, "validation")
            self._checkpointed(trainer)

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, state: Any) -> None:
            if self._phase is None:  # (a save within validation stays in it)
                self._report(trainer, "checkpoint")

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self._phase is not None:
                self._report(trainer, None)

    return DDPJobProgress


def callbacks() -> list[Any]:
    """Lightning's (``lightning.pytorch``) factory: the callback, in a DDPJob's pod."""
    if not os.environ.get(URL_ENV):
        return []
    from lightning.pytorch import Callback

    return [_make(Callback)()]


def pytorch_lightning_callbacks() -> list[Any]:
    """The standalone ``pytorch_lightning`` package's factory."""
    if not os.environ.get(URL_ENV):
        return []
    from pytorch_lightning import Callback

    return [_make(Callback)()]
