"""The RLOO stage's learner: one training_step = one rollout batch (B prompts x k samples) = one Lightning step.

A `Collector` (`ablate.lit.collector`: sampler, engine, verifier, replay, dynamic sampling, a DOTS reference
set) hands each step its scored batch and the metrics that describe it; this module learns from it and logs.
Manual optimization: the batch's loss is back-propagated in micro-batches before an optimizer step (by default
one per batch; stage.ppo_epochs x stage.ppo_mini_batches, `ablate.lit.updates`), after which the rollout engine
gets the new weights. It knows no task, tool, sampler or engine by name.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L
from lightning.pytorch.core.optimizer import LightningOptimizer
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import ablate.lit
from ablate.lit import CompilableLearner
from ablate.lit import overlong
from ablate.lit.collector import Collector
from ablate.lit.updates import mean_metrics, update_plan
from ablate.lit.micro_batches import (CHUNKED_VOCAB, LOGIT_CHUNK, learner_totals, micro_batch_shares, micro_batches,
                                     reference_dtype)
from ablate.lit.rollout_batch import Collected, PhaseTimer, pad_rollouts
from ablate.fused_vocab import fused_logprobs
from ablate.objectives import (aggregate, entropy_from_logits, kl_penalty, policy_gradient_loss,
                               scaled_advantages, token_logprobs)
from ablate.perf import step_throughput
from ablate.rollout import Rollouts


class RLOOModule(CompilableLearner, L.LightningModule):
    def __init__(self, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, collector: Collector,
                 stage: Any):
        super().__init__()
        self.automatic_optimization = False
        self.model = policy
        # Kept out of the module tree (a tuple, not an attribute Lightning registers): the frozen
        # starting model is rebuilt from the same init on resume, so it needs no checkpoint space.
        # With kl_coef=0 the KL term adds exact zeros to the loss and its gradient, so the reference
        # is not built and its forward (a fifth of a step) is skipped: the same numbers, no train/kl.
        self._frozen = ((copy.deepcopy(policy).eval().requires_grad_(False).to(reference_dtype(stage.reference_dtype)),)
                        if stage.kl_coef != 0 else ())
        self.tokenizer = tokenizer
        self.collector = collector
        self.stage = stage
        self.timer = PhaseTimer()  # a new one each step
        self.collected: Collected | None = None  # the step's batch, kept for callbacks (bench/ reads it)
        self.learner_tokens = 0  # the last learn()'s tokens, for the throughput metrics
        self.parameter_count = sum(p.numel() for p in policy.parameters())
        self.vocab_size = getattr(getattr(policy, "config", None), "vocab_size", 0)

    @property
    def reference(self) -> PreTrainedModel | None:
        return self._frozen[0] if self._frozen else None

    def compile_learner(self) -> None:
        """trainer.compile=true: what `_logprobs` runs is compiled, the policy's and the reference's (it runs on the
        learner's batches): the whole model for a small vocabulary, its decoder for a large one (whose log-probs
        come from the hidden states: compiling the model's wrapper would leave its `get_decoder()` uncompiled).
        `_frozen` then holds the reference and, last, its compiled runner, which `learn` calls."""
        backend = ablate.lit.COMPILE_BACKEND  # read when called: a test swaps it
        self._learner = (torch.compile(self._runner(self.model), dynamic=True, backend=backend),)
        if self._frozen:
            self._frozen = (self._frozen[0], torch.compile(self._runner(self._frozen[0]), dynamic=True,
                                                           backend=backend))

    def _runner(self, model: torch.nn.Module) -> torch.nn.Module:
        """What `_logprobs` calls: the model (its logits) for a small vocabulary, else its decoder (hidden states)."""
        return model if self.vocab_size <= CHUNKED_VOCAB else model.get_decoder()

    def on_train_start(self) -> None:
        if self.reference is not None:
            self.reference.to(self.device)
        if self.global_rank > 0:
            self.collector.reseed(self.global_rank, self.global_step)
        self.collector.sync(self.model)

    def configure_optimizers(self):
        s = self.stage
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=s.lr, weight_decay=s.weight_decay,
                                      betas=(0.9, 0.999))
        warmup = s.warmup_steps
        if warmup <= 0:  # constant lr: no scheduler at all
            return optimizer
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return [optimizer], [schedule]

    def learn(self, rollouts: Rollouts, rewards: torch.Tensor) -> dict[str, float]:
        """The batch's optimizer steps (`ablate.lit.updates`: stage.ppo_epochs passes of stage.ppo_mini_batches
        steps each, one by default), against the behaviour log-probs fixed at collection: the `train/*` loss
        metrics, each the mean over the updates (is_weight_max the largest). The lr schedule steps once per
        batch, so stage.warmup_steps counts batches as max_steps does."""
        s = self.stage
        advantages = scaled_advantages(rewards, s.advantage, s.advantage_scale).flatten()
        batch = pad_rollouts(rollouts, self.tokenizer.pad_token_id)
        if s.mask_truncated:  # no loss on completions cut at the budget (their rewards still set the baselines)
            batch["loss_mask"] *= ~overlong.truncated(rollouts, self.tokenizer.eos_token_id)[:, None]
        optimizer = self.optimizers()
        lr = optimizer.param_groups[0]["lr"]
        plan = update_plan(rewards.shape[0], rewards.shape[1], s.ppo_epochs, s.ppo_mini_batches)
        self.model.train()
        self.learner_tokens = s.ppo_epochs * int(batch["attention_mask"].sum())
        updates = [self._update(batch, advantages, rows, optimizer, last=i == len(plan) - 1)
                   for i, rows in enumerate(plan)]
        if s.warmup_steps > 0:
            with self.timer("optimizer"):
                self.lr_schedulers().step()
        metrics = mean_metrics(updates, maxima=("train/is_weight_max",))
        metrics["train/lr"] = lr
        return metrics

    def _update(self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, rows: torch.Tensor, optimizer: Any,
                last: bool) -> dict[str, float]:
        """One optimizer step on the batch's `rows`, back-propagated in micro-batches: its `train/*` metrics.

        Micro-batches of sequences of similar length (cut to their longest: right padding changes no
        logit) compute less padding; each one's loss is scaled by its `micro_batch_shares` of the rows."""
        s = self.stage
        length = s.sampling.max_new_tokens  # aggregation=token_sum_norm's fixed normaliser
        n = len(rows)
        policy_loss = s.policy_loss  # the loss's keys, once a step (a property builds them)
        totals, optional = learner_totals(s, self.reference is not None)
        is_weight_max = 0.0
        lengths = batch["attention_mask"].sum(-1)
        order = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
        tokens_total = batch["loss_mask"][rows].sum().clamp(min=1)
        for part in micro_batches(order, lengths, s.micro_batch, s.micro_batch_tokens):
            width = int(lengths[part].max())
            ids = batch["input_ids"][part, :width].to(self.device)
            mask = batch["loss_mask"][part, :width - 1].to(self.device)
            # Right padding under causal attention: no real token sees a pad, so no attention mask is
            # needed, and without one SDPA takes its faster causal path (the same logits).
            with self.timer("policy_forward"):
                logprobs, token_entropy = self._logprobs(self.model, self._learner[0] if self._learner else
                                                         self._runner(self.model), ids)
            pg, info = policy_gradient_loss(logprobs, batch["behaviour"][part, :width - 1].to(self.device),
                                            advantages[part].to(self.device), mask, policy_loss, length)
            entropy = aggregate(token_entropy, mask, s.aggregation, length)
            if self.reference is None:
                kl, loss = None, pg - s.entropy_coef * entropy
            else:
                with torch.no_grad(), self.timer("reference_forward"):
                    ref_logprobs = self._logprobs(self.reference, self._frozen[-1] if len(self._frozen) > 1 else
                                                  self._runner(self.reference), ids, entropy=False)[0]
                kl = aggregate(kl_penalty(logprobs, ref_logprobs, s.kl_estimator), mask, s.aggregation, length)
                loss = pg + s.kl_coef * kl - s.entropy_coef * entropy
            share = micro_batch_shares(len(part), n, mask.sum(), tokens_total, s.aggregation, s.is_level)
            with self.timer("backward"):
                self.manual_backward(loss * share.loss)
            for key, value in (("loss", loss), ("pg_loss", pg), ("kl", kl), ("entropy", entropy)):
                if value is not None:
                    totals[key] += float(value.detach()) * share.loss
            for key, value in (("is_weight_mean", info["ratio_mean"]), ("is_clip_frac", info["clip_fraction"])):
                totals[key] += float(value) * share.ratio
            for key, name in optional.items():  # fractions of sequences, or of tokens at the token level
                totals[name] += float(info[key]) * share.fraction
            is_weight_max = max(is_weight_max, float(info["ratio_max"]))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip)
        with self.timer("optimizer"):
            self._optimizer_step(optimizer, counted=last)
            optimizer.zero_grad(set_to_none=True)
        metrics = {f"train/{key}": value for key, value in totals.items()}
        metrics.update({"train/is_weight_max": is_weight_max, "train/grad_norm": float(grad_norm)})
        return metrics

    def _optimizer_step(self, optimizer: Any, counted: bool) -> None:
        """Lightning counts each LightningOptimizer.step as a global step, and a run's steps are its batches
        (max_steps, checkpoints, the tool schedule, metrics.csv's rows): a batch's earlier updates go to the
        strategy directly (what that step calls, uncounted), its last one through the counted step."""
        if counted or not isinstance(optimizer, LightningOptimizer):
            optimizer.step()
        else:
            self.trainer.strategy.optimizer_step(optimizer.optimizer, closure=lambda: None)

    def _logprobs(self, model: torch.nn.Module, runner: torch.nn.Module, ids: torch.Tensor,
                  entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token log-probs and entropies [rows, width - 1] of `ids` under `model`, computed by `runner` (`_runner`,
        compiled or not): from the whole logits for a small vocabulary, else from the hidden states and `model`'s
        output head, LOGIT_CHUNK positions at a time, without an fp32 [tokens, vocabulary] tensor
        (`ablate.fused_vocab`). The reference (`entropy=False`) computes no entropy."""
        if self.vocab_size <= CHUNKED_VOCAB:
            logits = runner(input_ids=ids).logits[:, :-1]
            return token_logprobs(logits, ids[:, 1:]), entropy_from_logits(logits) if entropy else None
        hidden = runner(input_ids=ids).last_hidden_state[:, :-1]
        return fused_logprobs(hidden, ids[:, 1:], model.get_output_embeddings(), LOGIT_CHUNK, entropy=entropy)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """collect -> learn -> sync -> log, each phase timed into `time/<phase>_s`."""
        self.timer = PhaseTimer()
        self.collected = collected = self.collector.collect(self.global_step, self.timer)
        with self.timer("learn"):
            learned = self.learn(collected.rollouts, collected.rewards)
        with self.timer("sync"):
            self.collector.sync(self.model)
        self.log_step(collected, learned)

    def log_step(self, collected: Collected, learned: dict[str, float]) -> None:
        """The step's metrics: the updates' `train/*`, what the collector says of its batch, the phase times
        and the throughput."""
        metrics = {**learned, **collected.metrics, **self.timer.metrics()}
        generated = sum(len(c) for c in collected.seen.rollouts.completion_ids)
        metrics.update(step_throughput(self.timer.seconds["generate"], self.timer.seconds["learn"], generated,
                                       self.learner_tokens, self.parameter_count, self.reference is not None,
                                       self.device))
        self.log_dict(metrics, prog_bar=False, on_step=True)
        self.log("reward", metrics["train/reward_mean"], prog_bar=True, logger=False)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.update(self.collector.state_dict())

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.collector.load_state_dict(checkpoint)
