"""Held-out evaluation during training (`eval.every=N`): `val/*` columns in metrics.csv.

Every N optimizer steps the policy samples `eval.val_n` completions for each prompt of the validation
split (`eval.val_size` prompts, stratified by operand count, disjoint from the test split and from
training: `build_splits(val_size=...)`) with the run's eval sampling, and the step's metrics.csv row
gets `val/pass@1`, `val/coverage`, `val/no_answer_rate`, ... overall and per report level of the task
(Countdown: per operand count, `val/by_operands/<n>/...`), plus `time/val_s`. The run's tool does not answer there, unless
`eval.val_regime` (by default: a tool whose format needs its replies, the solver oracle) says so. The row
of step t describes the policy after step t's update (t + 1 updates), evaluated when t + 1 is a multiple
of N and at the last step.

Sampling draws from a generator seeded by (run seed, step), so the numbers do not depend on what
ran before: a resumed run logs the same `val/*` rows as an uninterrupted one. With
`checkpoint.keep_evaluated=true` each evaluated step's Lightning checkpoint is kept as
`checkpoints/val-step=<updates>.ckpt` (resume still uses last.ckpt).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import lightning as L

from ablate.config import typed
from ablate.config.schemas import EvalConfig
from ablate.eval import evaluate
from ablate.rundir.metrics_csv import TIME, VAL
from ablate.seeds import seed_of
from ablate.tasks import Task

log = logging.getLogger(__name__)

# summary.json keys logged as val/<key> (and val/<level block>/<level>/<key>, e.g. val/by_operands/3/pass@1)
VAL_KEYS = ("pass@1", "exact_pass@1", "coverage", "no_answer_rate", "mean_response_length")


def val_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The `val/*` columns of one evaluation summary (`ablate.eval.summarize`)."""
    def block(b: Mapping[str, Any], prefix: str) -> dict[str, float]:
        out = {f"{prefix}{key}": float(b[key]) for key in VAL_KEYS if key in b}
        out[f"{prefix}no_answer_rate"] = 1.0 - float(b["coverage"])
        return out

    metrics = block(summary, VAL)
    for name, levels in summary.items():  # the report level's block (ablate.eval.summarize), if the task has one
        if name.startswith("by_") and isinstance(levels, dict):
            for n, b in levels.items():
                metrics.update(block(b, f"{VAL}{name}/{n}/"))
    return metrics


class ValidationCallback(L.Callback):
    def __init__(self, problems: Sequence[Any], tokenizer, template: str, task: Task,
                 eval_cfg: Mapping[str, Any], seed: int, every: int, max_steps: int, keep_checkpoints: Path | None = None,
                 tool_cfg: Mapping[str, Any] | None = None, tool=None):
        self.problems = list(problems)
        self.tokenizer = tokenizer
        self.template = template
        self.task = task
        e = typed(EvalConfig, eval_cfg)
        self.eval_cfg = dataclasses.replace(e, n=e.val_n, ks=[1], save_completions=0)
        self.seed, self.every, self.max_steps = seed, every, max_steps
        self.keep_checkpoints = keep_checkpoints
        self.tool_cfg = tool_cfg  # decorates the prompts
        self.tool = tool  # answers in validation (eval.val_regime); None: the no_tool regime

    def due(self, updates: int) -> bool:
        return updates % self.every == 0 or updates == self.max_steps

    def columns(self) -> list[str]:
        levels = sorted({self.task.level(p) for p in self.problems} - {None})
        blocks = [VAL] + [f"{VAL}{self.task.level_block}/{n}/" for n in levels]
        return [f"{b}{key}" for b in blocks for key in VAL_KEYS] + [f"{TIME}val_s"]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        updates = trainer.global_step  # optimizer steps so far, this batch's included
        if not self.due(updates):
            # Lightning re-logs a value logged from a hook until that hook logs again: NaN keeps the
            # columns sparse (one row per step, values only where evaluated).
            pl_module.log_dict({key: float("nan") for key in self.columns()}, on_step=True, on_epoch=False)
            return
        clock = time.monotonic()
        model = pl_module.model
        was_training = model.training
        summary, _ = evaluate(model, self.tokenizer, self.problems, self.template, self.task, self.eval_cfg,
                              seed_of("val", self.seed, updates), self.tool, tool_cfg=self.tool_cfg,
                              progress=False)
        model.train(was_training)
        metrics = val_metrics(summary)
        metrics[f"{TIME}val_s"] = time.monotonic() - clock
        pl_module.log_dict(metrics, on_step=True, on_epoch=False)
        log.info("val @ %d updates%s: pass@1 %.3f, no answer %.3f (%.1f s)", updates,
                 " (with the tool)" if self.tool is not None else "", metrics[f"{VAL}pass@1"],
                 metrics[f"{VAL}no_answer_rate"], metrics[f"{TIME}val_s"])
        if self.keep_checkpoints is not None:  # every rank calls it; Lightning writes once
            trainer.save_checkpoint(str(self.keep_checkpoints / f"val-step={updates}.ckpt"))
