"""Training wall time over every attempt of a run, for every stage: one Lightning callback."""

from __future__ import annotations

import time

import lightning as L


class ElapsedTime(L.Callback):
    """Logs `time/elapsed_s` (training seconds, earlier attempts included) at every step, and carries
    it across a resume in the checkpoint (`elapsed_s`, where the stages kept it before this callback)."""

    def __init__(self) -> None:
        self.before = 0.0  # seconds of earlier attempts (restored on resume)
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.started

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = time.monotonic()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        pl_module.log("time/elapsed_s", self.elapsed(), on_step=True, on_epoch=False)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint["elapsed_s"] = self.elapsed()

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self.before = float(checkpoint.get("elapsed_s", 0.0))
