"""The RLOO stage: one training_step = one rollout batch (B prompts x k samples) = one optimizer step.

Manual optimization: the batch is scored and its loss back-propagated in micro-batches before a
single optimizer step, after which the rollout engine gets the new weights. The engine, the reward
and the prompt sampler are injected; this module imports none of them by name.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, Mapping, Sequence

import lightning as L
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ablate.models import encode_prompt, prompt_text
from ablate.objectives import (aggregate, entropy_from_logits, grpo_advantages, kl_penalty, policy_gradient_loss,
                               rloo_advantages, token_logprobs)
from ablate.rollout import Rollouts, SamplingParams
from ablate.tasks.countdown import VERDICTS, Problem


class UniformSampler:
    """`curriculum=none`: prompts uniformly at random (with replacement) from the training pool."""

    def __init__(self, n: int, seed: int):
        self.n = n
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self, batch: int) -> list[int]:
        return torch.randint(self.n, (batch,), generator=self.generator).tolist()

    def update(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["generator"])


def pad_rollouts(rollouts: Rollouts, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded prompt+completion ids with masks aligned to next-token targets [N, L-1]."""
    sequences = [p + c for p, c in zip(rollouts.prompt_ids, rollouts.completion_ids)]
    width = max(map(len, sequences))
    n = len(sequences)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width - 1))
    behaviour = torch.zeros((n, width - 1))
    for i, (prompt, completion) in enumerate(zip(rollouts.prompt_ids, rollouts.completion_ids)):
        ids[i, :len(prompt) + len(completion)] = torch.tensor(prompt + completion)
        attention[i, :len(prompt) + len(completion)] = 1
        start = len(prompt) - 1  # target position t+1 is predicted at t
        span = slice(start, start + len(completion))
        loss_mask[i, span] = torch.tensor([0.0 if tool else 1.0 for tool in rollouts.tool_mask[i]])
        behaviour[i, span] = torch.tensor(rollouts.behaviour_logprobs[i])
    return {"input_ids": ids, "attention_mask": attention, "loss_mask": loss_mask, "behaviour": behaviour}


class RLOOModule(L.LightningModule):
    def __init__(self, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem],
                 template: str, engine: Any, reward: Callable, sampler: Any, stage: Mapping[str, Any], seed: int):
        super().__init__()
        self.automatic_optimization = False
        self.model = policy
        # Kept out of the module tree (a tuple, not an attribute Lightning registers): the frozen
        # starting model is rebuilt from the same init on resume, so it needs no checkpoint space.
        self._frozen = (copy.deepcopy(policy).eval().requires_grad_(False),)
        self.tokenizer = tokenizer
        self.problems = list(problems)
        self.template = template
        self.engine = engine
        self.reward = reward
        self.sampler = sampler
        self.stage = dict(stage)
        self.params = SamplingParams(**dict(stage["sampling"]))
        self.rollout_generator = torch.Generator().manual_seed(seed)
        self.elapsed_before = 0.0
        self.started = time.monotonic()

    @property
    def reference(self) -> PreTrainedModel:
        return self._frozen[0]

    def on_train_start(self) -> None:
        self.started = time.monotonic()
        self.reference.to(self.device)
        # An engine holding its own copy of the weights (rollout=vllm) was built from the starting
        # model; on resume Lightning has since loaded the checkpoint's weights into the policy.
        self.engine.sync(self.model)

    def configure_optimizers(self):
        s = self.stage
        return torch.optim.AdamW(self.model.parameters(), lr=float(s["lr"]), weight_decay=float(s["weight_decay"]),
                                 betas=(0.9, 0.999))

    def _score(self, problems: Sequence[Problem], rollouts: Rollouts) -> tuple[torch.Tensor, list[str]]:
        rewards, verdicts = [], []
        for i, text in enumerate(rollouts.texts):
            problem = problems[i // rollouts.k]
            value, judgement = self.reward(text, problem.numbers, problem.target)
            rewards.append(value)
            verdicts.append(judgement.verdict.value)
        return torch.tensor(rewards, dtype=torch.float32).view(len(problems), rollouts.k), verdicts

    def training_step(self, batch: Any, batch_idx: int) -> None:
        s = self.stage
        clock = time.monotonic()
        indices = self.sampler.sample(int(s["batch_prompts"]))
        problems = [self.problems[i] for i in indices]
        prompts = [encode_prompt(prompt_text(p, self.template, self.tokenizer), self.tokenizer) for p in problems]
        rollouts = self.engine.generate(prompts, int(s["k"]), self.params, self.rollout_generator)
        generate_s = time.monotonic() - clock
        clock = time.monotonic()
        rewards, verdicts = self._score(problems, rollouts)
        self.sampler.update(indices, rewards)
        score_s = time.monotonic() - clock

        clock = time.monotonic()
        advantages = (rloo_advantages(rewards) if s["advantage"] == "rloo" else grpo_advantages(rewards)).flatten()
        batch = pad_rollouts(rollouts, self.tokenizer.pad_token_id)
        optimizer = self.optimizers()
        n = advantages.numel()
        totals = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "is_weight_mean": 0.0, "is_clip_frac": 0.0}
        is_weight_max = 0.0
        self.model.train()
        for start in range(0, n, int(s["micro_batch"])):
            part = slice(start, start + int(s["micro_batch"]))
            ids = batch["input_ids"][part].to(self.device)
            attention = batch["attention_mask"][part].to(self.device)
            mask = batch["loss_mask"][part].to(self.device)
            logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1]
            logprobs = token_logprobs(logits, ids[:, 1:])
            with torch.no_grad():
                ref_logprobs = token_logprobs(self.reference(input_ids=ids, attention_mask=attention).logits[:, :-1],
                                              ids[:, 1:])
            pg, info = policy_gradient_loss(logprobs, batch["behaviour"][part].to(self.device),
                                            advantages[part].to(self.device), mask, level=s["is_level"],
                                            clip=float(s["is_clip"]), clip_eps=float(s["clip_eps"]),
                                            aggregation=s["aggregation"])
            kl = aggregate(kl_penalty(logprobs, ref_logprobs, s["kl_estimator"]), mask, s["aggregation"])
            entropy = aggregate(entropy_from_logits(logits), mask, s["aggregation"])
            loss = pg + float(s["kl_coef"]) * kl - float(s["entropy_coef"]) * entropy
            share = ids.size(0) / n
            self.manual_backward(loss * share)
            for key, value in (("loss", loss), ("pg_loss", pg), ("kl", kl), ("entropy", entropy),
                               ("is_weight_mean", info["ratio_mean"]), ("is_clip_frac", info["clip_fraction"])):
                totals[key] += float(value.detach()) * share
            is_weight_max = max(is_weight_max, float(info["ratio_max"]))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(s["grad_clip"]))
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        learn_s = time.monotonic() - clock
        clock = time.monotonic()
        self.engine.sync(self.model)
        sync_s = time.monotonic() - clock

        generated = sum(len(c) for c in rollouts.completion_ids)
        metrics = {f"train/{key}": value for key, value in totals.items()}
        metrics.update({
            "train/reward_mean": rewards.mean().item(),
            "train/reward_std": rewards.std().item(),
            "train/effective_prompt_frac": (rewards.std(dim=-1) > 0).float().mean().item(),
            "train/is_weight_max": is_weight_max,
            "train/response_length": generated / len(rollouts.completion_ids),
            "train/grad_norm": float(grad_norm),
            "train/lr": lr,
            "time/generate_s": generate_s, "time/score_s": score_s, "time/learn_s": learn_s, "time/sync_s": sync_s,
            "time/generate_tokens_per_s": generated / max(generate_s, 1e-9),
            "time/elapsed_s": self.elapsed_before + time.monotonic() - self.started,
        })
        for verdict in VERDICTS:  # correct rate, no-answer rate, ... (fractions of samples)
            metrics[f"train/verdict/{verdict}"] = sum(v == verdict for v in verdicts) / len(verdicts)
        self.log_dict(metrics, prog_bar=False, on_step=True)
        self.log("reward", metrics["train/reward_mean"], prog_bar=True, logger=False)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sampler"] = self.sampler.state_dict()
        checkpoint["rollout_generator"] = self.rollout_generator.get_state()
        checkpoint["elapsed_s"] = self.elapsed_before + time.monotonic() - self.started

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.sampler.load_state_dict(checkpoint["sampler"])
        self.rollout_generator.set_state(checkpoint["rollout_generator"])
        self.elapsed_before = float(checkpoint.get("elapsed_s", 0.0))
