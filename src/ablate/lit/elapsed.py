"""Training time over every attempt of a run, for every stage: one Lightning callback."""

from __future__ import annotations

import time

import lightning as L

from ablate.rundir.metrics_csv import TIME


class ElapsedTime(L.Callback):
    """Logs `time/elapsed_s` (training wall seconds) and `time/cpu_s` (the process's CPU seconds, all its
    threads) at every step, earlier attempts included, and carries both across a resume in the checkpoint.

    Why both: wall time is what a user waits, but on a shared machine it measures the load as much as the
    recipe (002's confirmatory uniform arm: 536-1,938 s a run on one machine). CPU time counts only this
    process's work, so a cost claim (seconds per step) compares recipes, not neighbours."""

    def __init__(self) -> None:
        self.before = 0.0  # wall seconds of earlier attempts (restored on resume)
        self.cpu_before = 0.0  # CPU seconds of earlier attempts
        self.started, self.cpu_started = time.monotonic(), time.process_time()

    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.started

    def cpu(self) -> float:
        return self.cpu_before + time.process_time() - self.cpu_started

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started, self.cpu_started = time.monotonic(), time.process_time()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        pl_module.log(f"{TIME}elapsed_s", self.elapsed(), on_step=True, on_epoch=False)
        pl_module.log(f"{TIME}cpu_s", self.cpu(), on_step=True, on_epoch=False)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint["elapsed_s"], checkpoint["cpu_s"] = self.elapsed(), self.cpu()

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self.before = float(checkpoint.get("elapsed_s", 0.0))
        self.cpu_before = float(checkpoint.get("cpu_s", 0.0))
