"""The preference stage (`stage=dpo`, `stage=ipo`): offline pairs, a frozen reference, one loss.

The reference is the starting model. Its sequence log-probs are computed once per pair, before
training (`reference_logprobs`), and kept with the pairs; no reference model is held during
training, so every epoch reuses the same numbers and memory holds one model. One training step
takes the next `batch_size` pairs of a fixed schedule (`ablate.pairs.order_pairs`), indexed by
the global step, so a resumed run continues the same order. With DDP each rank takes its own
`batch_size` pairs of that order per step (the effective batch is batch_size x ranks, as for SFT).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Mapping, Sequence

import lightning as L
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ablate.lit import CompilableLearner
from ablate.pairs import Pair
from ablate.lit.sft import warmup_cosine
from ablate.lit.sft_data import tool_output_mask
from ablate.models import encode_prompt
from ablate.objectives import PREFERENCE_LOSSES, preference_margin, sequence_logprobs, token_logprobs
from ablate.padding import attention_mask, right_pad

def encode_pair(pair: Pair, tokenizer: PreTrainedTokenizerBase, max_length: int) -> dict[str, Any]:
    """Token ids of prompt + response + eos for both responses, and which response tokens carry loss
    (not the prompt, not tool output `<result>...</result>`), cut to max_length tokens."""
    prompt = encode_prompt(pair.prompt, tokenizer)
    vocab = tokenizer.get_vocab()
    result_ids = (vocab.get("<result>"), vocab.get("</result>"))
    out: dict[str, Any] = {}
    for side, text in (("chosen", pair.chosen), ("rejected", pair.rejected)):
        response = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        loss = [False] * len(prompt) + [not tool for tool in tool_output_mask(response, *result_ids)]
        out[side] = (prompt + response)[:max_length]
        out[f"{side}_loss"] = loss[:max_length]
    return out


def collate_pairs(items: Sequence[Mapping[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Chosen sequences then rejected ones, right-padded, [2B, L]; `loss_mask` [2B, L-1] is aligned
    with next-token targets (position t predicts token t+1)."""
    sequences = [item["chosen"] for item in items] + [item["rejected"] for item in items]
    masks = [item["chosen_loss"] for item in items] + [item["rejected_loss"] for item in items]
    ids, attention = right_pad(sequences, pad_id), attention_mask(sequences)
    loss_mask = right_pad([[float(m) for m in mask[1:len(sequence)]] for sequence, mask in zip(sequences, masks)],
                          0.0, torch.float32, ids.shape[1] - 1)
    return {"input_ids": ids, "attention_mask": attention, "loss_mask": loss_mask}


def pair_logprobs(model: PreTrainedModel, batch: Mapping[str, torch.Tensor],
                  average: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence log-probs (summed, or averaged over response tokens) of the chosen [B] and the rejected
    [B] responses, from one forward pass over both."""
    device = next(model.parameters()).device
    ids = batch["input_ids"].to(device)
    logits = model(input_ids=ids, attention_mask=batch["attention_mask"].to(device)).logits[:, :-1]
    logps = sequence_logprobs(token_logprobs(logits, ids[:, 1:]), batch["loss_mask"].to(device), average)
    return logps.chunk(2)


@torch.no_grad()
def reference_logprobs(model: PreTrainedModel, encoded: Sequence[Mapping[str, Any]], pad_id: int, average: bool,
                       batch_size: int = 32, autocast: str | None = None) -> torch.Tensor:
    """[P, 2] reference log-probs (chosen, rejected) of every pair, one forward pass per pair."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    context = torch.autocast(device.type, dtype=torch.bfloat16) if autocast == "bf16" else nullcontext()
    out = []
    with context:
        for start in range(0, len(encoded), batch_size):
            chosen, rejected = pair_logprobs(model, collate_pairs(encoded[start:start + batch_size], pad_id), average)
            out.append(torch.stack([chosen, rejected], dim=-1).float().cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros((0, 2))


class PreferenceModule(CompilableLearner, L.LightningModule):
    def __init__(self, model: PreTrainedModel, encoded: Sequence[Mapping[str, Any]], reference: torch.Tensor,
                 order: Callable[[int], Sequence[int]], stage: Any,
                 pad_id: int):
        """`order(length)` gives the training order of pair indices (ablate.pairs.order_pairs); `stage`:
        the preference stage's config as its schema's instance (`ablate.config.typed(PreferenceStageConfig,
        cfg.stage)`, ablate.stages.preference)."""
        super().__init__()
        if len(reference) != len(encoded):
            raise ValueError(f"{len(reference)} reference log-prob rows for {len(encoded)} pairs")
        self.model = model
        for module in model.modules():  # as TRL: with dropout the policy would not match the reference at step 0
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        self.encoded = list(encoded)
        self.reference = reference.float()  # [P, 2], fixed; not a parameter, not in the checkpoint
        self.order = order
        self.schedule: list[int] = []
        self.stage = stage
        self.pad_id = pad_id
        self.loss = PREFERENCE_LOSSES[self.stage.name]

    def on_fit_start(self) -> None:
        size, world = self.stage.batch_size, self.trainer.world_size
        self.schedule = list(self.order(self.stage.max_steps * size * world))

    def indices(self, step: int) -> list[int]:
        size = self.stage.batch_size
        start = (step * self.trainer.world_size + self.global_rank) * size
        return self.schedule[start:start + size]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        s = self.stage
        indices = self.indices(self.global_step)
        chosen, rejected = pair_logprobs(self.learner, collate_pairs([self.encoded[i] for i in indices], self.pad_id),
                                         s.average_logps)
        ref = self.reference[indices].to(chosen.device)
        ref_chosen, ref_rejected = ref[:, 0], ref[:, 1]
        beta = s.beta
        loss = self.loss(chosen, rejected, ref_chosen, ref_rejected, s).mean()
        h = preference_margin(chosen, rejected, ref_chosen, ref_rejected).detach()
        self.log_dict({
            "train/loss": loss.detach(),
            "train/reward_accuracy": (h > 0).float().mean(),
            "train/margin": h.mean(),
            "train/logp_chosen": chosen.detach().mean(),
            "train/logp_rejected": rejected.detach().mean(),
            "train/reward_chosen": beta * (chosen.detach() - ref_chosen).mean(),
            "train/reward_rejected": beta * (rejected.detach() - ref_rejected).mean(),
            "train/lr": self.optimizers().param_groups[0]["lr"],
        }, on_step=True)
        self.log("acc", (h > 0).float().mean(), prog_bar=True, logger=False)
        return loss

    def configure_optimizers(self):
        s = self.stage
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=s.lr, weight_decay=s.weight_decay,
                                      betas=(0.9, 0.999))
        warmup, total, floor = s.warmup_steps, s.max_steps, s.min_lr_ratio
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, warmup, total, floor))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
