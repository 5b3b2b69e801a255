"""The SFT stage: masked next-token cross-entropy on response tokens."""

from __future__ import annotations

import math

import lightning as L
import torch
from transformers import PreTrainedModel

from ablate.lit import CompilableLearner
from ablate.objectives import IGNORE, sft_loss


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup to 1, then cosine decay to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class SFTModule(CompilableLearner, L.LightningModule):
    def __init__(self, model: PreTrainedModel, lr: float, weight_decay: float, warmup_steps: int, total_steps: int,
                 min_lr_ratio: float = 0.0, betas: tuple[float, float] = (0.9, 0.95)):
        super().__init__()
        self.model = model
        self.save_hyperparameters(ignore=["model"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.learner(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = sft_loss(logits, batch["labels"])
        tokens = (batch["labels"][:, 1:] != IGNORE).sum()
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/response_tokens", tokens.float(), reduce_fx="sum")
        self.log("train/lr", self.optimizers().param_groups[0]["lr"])
        return loss

    def configure_optimizers(self):
        h = self.hparams
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": h.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=h.lr, betas=tuple(h.betas))
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, h.warmup_steps, h.total_steps, h.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
