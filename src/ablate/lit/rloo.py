"""The RLOO stage: one training_step = one rollout batch (B prompts x k samples) = one Lightning step.

Manual optimization: the batch is scored and its loss back-propagated in micro-batches before an
optimizer step (by default one per batch; stage.ppo_epochs x stage.ppo_mini_batches, `ablate.lit.updates`),
after which the rollout engine gets the new weights. The engine, the task
(whose verifier scores the rollouts: `ablate.tasks.base.Task.score`), the prompt sampler
(`ablate.curriculum`) and the optional replay buffer are injected; this module imports none of
them by name. A sampler that asks for a reference set (DOTS) gets it rolled out and
scored before the step's batch.

Tools (paper 003): each rollout of step t gets the engine's tool with probability p_tool(t) (the
`tool.schedule`), drawn from a checkpointed generator of its own; with `tool.prompt=when_available`
its prompt says so (the calculator preamble), so the k prompts of a group may differ.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Mapping, Sequence

import lightning as L
from lightning.pytorch.core.optimizer import LightningOptimizer
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ablate.lit import CompilableLearner
from ablate.lit import overlong
from ablate.lit.updates import mean_metrics, update_plan
from ablate.lit.micro_batches import (CHUNKED_VOCAB, LOGIT_CHUNK, learner_totals, micro_batch_shares, micro_batches,
                                     reference_dtype)
from ablate.lit.rollout_batch import (Collected, FreshGroups, PhaseTimer, informative_groups,
                                      level_metrics, pad_rollouts)
from ablate.objectives import (aggregate, chunked_logprobs, entropy_from_logits, kl_penalty, policy_gradient_loss,
                               scaled_advantages, token_logprobs)
from ablate.perf import step_throughput
from ablate.rollout import Rollouts, SamplingParams
from ablate.rollout.schedules import ToolAvailability, p_tool
from ablate.rollout.tools import TOOL_OFF, ToolPrompt
from ablate.seeds import rank_seed, seed_of
from ablate.tasks import CORRECT, Task


class RLOOModule(CompilableLearner, L.LightningModule):
    def __init__(self, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Any],
                 template: str, engine: Any, task: Task, sampler: Any,
                 stage: Any, seed: int, replay: Any = None,
                 tool: Mapping[str, Any] | None = None,
                 dynamic_sampling: Mapping[str, Any] | None = None):
        """`stage`: the rloo stage's config as its schema's instance (`ablate.config.typed(RLOOStageConfig,
        cfg.stage)`, ablate.stages.rloo), read by attribute."""
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
        self.problems = list(problems)
        self.template = template
        self.engine = engine
        self.task = task
        self.sampler = sampler
        self.replay = replay
        self.dynamic = dict(dynamic_sampling or {"enabled": False})
        self.levels = sorted({task.level(p) for p in self.problems} - {None})  # the report levels of the pool
        self.stage = stage
        self.params = SamplingParams(**dataclasses.asdict(stage.sampling))
        self.seed = seed
        self.rollout_generator = torch.Generator().manual_seed(seed_of("rollout", seed))
        self.tool = dict(tool or TOOL_OFF)
        self.prompt = ToolPrompt(self.tool, template, tokenizer, task)  # the tool decorates the task's prompts
        self.availability = ToolAvailability(seed_of("availability", seed))
        self.timer = PhaseTimer()  # a new one each step
        self.p_available = 0.0
        self.collected: Collected | None = None
        self.learner_tokens = 0  # the last learn()'s tokens, for the throughput metrics
        self.parameter_count = sum(p.numel() for p in policy.parameters())
        self.vocab_size = getattr(getattr(policy, "config", None), "vocab_size", 0)

    @property
    def reference(self) -> PreTrainedModel | None:
        return self._frozen[0] if self._frozen else None

    def compile_learner(self) -> None:
        """trainer.compile=true: the reference's forward is compiled too (it runs on the learner's batches);
        `_frozen` then holds the reference and, last, its compiled wrapper, which `learn` calls."""
        super().compile_learner()
        if self._frozen:
            self._frozen = (self._frozen[0], torch.compile(self._frozen[0], dynamic=True))

    def on_train_start(self) -> None:
        if self.reference is not None:
            self.reference.to(self.device)
        if self.global_rank > 0:
            # Data-parallel ranks sample their own prompts and rollouts (the checkpoint holds rank 0's
            # generators, so a resumed worker re-derives its own from the step it resumes at).
            for generator in (self.rollout_generator, self.sampler.generator, self.availability.generator):
                generator.manual_seed(rank_seed(self.seed, self.global_rank, self.global_step))
        # An engine holding its own copy of the weights (rollout=vllm) was built from the starting
        # model; on resume Lightning has since loaded the checkpoint's weights into the policy.
        self.engine.sync(self.model)

    def configure_optimizers(self):
        s = self.stage
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=s.lr, weight_decay=s.weight_decay,
                                      betas=(0.9, 0.999))
        warmup = s.warmup_steps
        if warmup <= 0:  # constant lr: no scheduler at all
            return optimizer
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return [optimizer], [schedule]

    def _score(self, problems: Sequence[Any], rollouts: Rollouts) -> tuple[torch.Tensor, list[str]]:
        rewards, verdicts = [], []
        for i, text in enumerate(rollouts.texts):
            value, verdict = self.task.score(problems[i // rollouts.k], text)
            rewards.append(value)
            verdicts.append(verdict)
        return torch.tensor(rewards, dtype=torch.float32).view(len(problems), rollouts.k), verdicts

    def _generate(self, indices: Sequence[int]) -> tuple[list[Any], Rollouts, list[bool], float]:
        problems = [self.problems[i] for i in indices]
        k = self.stage.k
        p_available = p_tool(self.global_step, self.stage.max_steps, self.tool)
        available = self.availability.draw(len(problems) * k, p_available)
        # One prompt per rollout (prompt-major), since its decoration can follow each rollout's draw.
        prompts = [self.prompt.ids(problems[i // k], a) for i, a in enumerate(available)]
        rollouts = self.engine.generate(prompts, 1, self.params, self.rollout_generator, tool_available=available)
        return problems, dataclasses.replace(rollouts, k=k), available, p_available

    def _roll_out(self, n: int, step: int) -> FreshGroups:
        """Sample n prompts, roll them out, score them and tell the sampler."""
        with self.timer("generate"):
            indices = self.sampler.sample(n, step)
            problems, fresh, available, p_available = self._generate(indices)
        with self.timer("score"):
            rewards, verdicts = self._score(problems, fresh)
            self.sampler.update(indices, rewards)
        self.p_available = p_available
        return FreshGroups(list(indices), problems, fresh, rewards, verdicts, available)

    def _fresh(self, n: int, step: int) -> tuple[FreshGroups, FreshGroups, dict[str, float]]:
        """The step's fresh groups: (kept, seen, metrics). Without dynamic sampling one batch of n prompts,
        kept = seen. With it (DAPO's filter-and-refill, after verl's `filter_groups`): further batches of n
        prompts from the sampler (which sees every group) until n informative groups or `max_gen_batches`
        batches; the first n informative groups are kept, in generation order, and if the cap leaves fewer,
        the batch is topped up with uninformative ones (verl raises there instead), so every step trains on
        n groups."""
        seen = self._roll_out(n, step)
        if not self.dynamic.get("enabled"):
            return seen, seen, {}
        parts, batches = [seen], 1
        before = self.timer.seconds["generate"]
        informative = informative_groups(torch.tensor([v == CORRECT for v in seen.verdicts]).view(-1, seen.rollouts.k))
        while int(informative.sum()) < n and batches < int(self.dynamic["max_gen_batches"]):
            more = self._roll_out(n, step)
            parts.append(more)
            batches += 1
            informative = torch.cat([informative, informative_groups(
                torch.tensor([v == CORRECT for v in more.verdicts]).view(-1, more.rollouts.k))])
        seen = FreshGroups.concat(parts)
        good = torch.nonzero(informative).flatten().tolist()[:n]
        filler = torch.nonzero(~informative).flatten().tolist()[:n - len(good)]
        kept = seen.groups(sorted(good + filler))
        metrics = {"dynamic/gen_batches": float(batches), "dynamic/kept_frac": float(informative.float().mean()),
                   "dynamic/topped_up_frac": len(filler) / n,
                   "dynamic/extra_generate_s": self.timer.seconds["generate"] - before}
        return kept, seen, metrics

    def collect(self, step: int) -> Collected:
        """Sampler -> engine -> reward -> replay: the batch this step learns from, and what describes it.
        A sampler's reference prompts (DOTS) are rolled out and scored first (`time/reference_s`)."""
        with self.timer("reference"):
            reference = self.sampler.reference_prompts(step)
            if reference:
                self.sampler.observe_reference(reference, self._score(*self._generate(reference)[:2])[0])
        n_prompts = self.stage.batch_prompts
        n_replay = self.replay.replay_count(n_prompts) if self.replay is not None else 0
        kept, seen, metrics = self._fresh(n_prompts - n_replay, step)
        rollouts, rewards = kept.rollouts, kept.rewards
        if self.replay is not None:
            replayed = self.replay.take(n_replay)
            stored = self.replay.add(kept.indices, kept.rollouts, kept.rewards, kept.verdicts, step)
            if replayed:
                rollouts = Rollouts.concat([kept.rollouts] + [g.rollouts for g in replayed])
                rewards = torch.cat([kept.rewards, torch.tensor([g.rewards for g in replayed])])
            metrics.update({"replay/replayed_frac": len(replayed) / n_prompts, "replay/buffer_size": len(self.replay),
                            "replay/stored": stored,
                            "replay/mean_age": sum(step - g.step for g in replayed) / len(replayed) if replayed else 0.0})
        if overlong.engaged(self.stage):  # DAPO's overlong shaping: on what is learnt from, after the filter
            rewards, shaping = overlong.shaped_rewards(rollouts, rewards, self.stage)
            metrics.update(shaping)
            cut = overlong.truncated(seen.rollouts, self.tokenizer.eos_token_id)
            metrics["train/truncated_frac"] = cut.float().mean().item()
        return Collected(seen, rollouts, rewards, self.p_available, metrics)

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
                logprobs, token_entropy = self._logprobs(self.learner, ids)
            pg, info = policy_gradient_loss(logprobs, batch["behaviour"][part, :width - 1].to(self.device),
                                            advantages[part].to(self.device), mask, level=s.is_level, clip=s.is_clip,
                                            clip_eps=s.clip_eps, aggregation=s.aggregation, mode=s.is_mode,
                                            low=s.is_low, dual_clip=s.dual_clip, clip_eps_low=s.clip_eps_low,
                                            clip_eps_high=s.clip_eps_high, length=length)
            entropy = aggregate(token_entropy, mask, s.aggregation, length)
            if self.reference is None:
                kl, loss = None, pg - s.entropy_coef * entropy
            else:
                with torch.no_grad(), self.timer("reference_forward"):
                    ref_logprobs = self._logprobs(self._frozen[-1], ids, entropy=False)[0]  # compiled, if it is
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

    def _logprobs(self, model: torch.nn.Module, ids: torch.Tensor,
                  entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token log-probs and entropies [rows, width - 1] of `ids` under `model`: from the whole logits for a
        small vocabulary, else from the hidden states, LOGIT_CHUNK positions at a time."""
        if self.vocab_size <= CHUNKED_VOCAB:
            logits = model(input_ids=ids).logits[:, :-1]
            return token_logprobs(logits, ids[:, 1:]), entropy_from_logits(logits) if entropy else None
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1]
        return chunked_logprobs(hidden, ids[:, 1:], model.get_output_embeddings(), LOGIT_CHUNK)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        """collect -> learn -> sync -> log, each phase timed into `time/<phase>_s`."""
        self.timer = PhaseTimer()
        self.collected = collected = self.collect(self.global_step)  # kept for callbacks (bench/ reads it)
        with self.timer("learn"):
            learned = self.learn(collected.rollouts, collected.rewards)
        with self.timer("sync"):
            self.engine.sync(self.model)
        self.log_step(collected, learned)

    def log_step(self, collected: Collected, learned: dict[str, float]) -> None:
        """The step's metrics: reward, verdicts and tool use of everything freshly generated (the current
        policy), the rest of the batch trained on; then the phase times."""
        seen, rollouts, rewards = collected.seen, collected.rollouts, collected.rewards
        problems, verdicts = seen.problems, seen.verdicts
        metrics = dict(learned)
        metrics.update({
            "train/reward_mean": seen.rewards.mean().item(),
            "train/reward_std": seen.rewards.std().item(),
            "train/effective_prompt_frac": (rewards.std(dim=-1) > 0).float().mean().item(),
            "train/response_length": sum(len(c) for c in rollouts.completion_ids) / len(rollouts.completion_ids),
        })
        metrics.update(self.sampler.metrics())
        metrics.update(collected.metrics)
        levels = [self.task.level(p) for p in problems]
        for n in self.levels:  # the difficulty mix of the fresh prompts, comparable across samplers
            metrics[f"curriculum/frac_n{n}"] = sum(level == n for level in levels) / max(len(problems), 1)
        n_rollouts = len(seen.rollouts.texts)
        metrics.update({
            "tool/p_available": collected.p_available,
            "tool/available_frac": sum(seen.available) / n_rollouts,
            "tool/calls_per_rollout": sum(seen.rollouts.tool_calls) / n_rollouts if seen.rollouts.tool_calls else 0.0,
            "tool/calc_emission_rate": sum("<calc>" in text for text in seen.rollouts.texts) / n_rollouts,
        })
        for verdict in self.task.verdicts:  # correct rate, no-answer rate, ... (fractions of samples)
            metrics[f"train/verdict/{verdict}"] = sum(v == verdict for v in verdicts) / len(verdicts)
        metrics.update(level_metrics(levels, seen.rewards, verdicts, self.levels, self.task.verdicts,
                                     self.task.level_block))
        generated = sum(len(c) for c in seen.rollouts.completion_ids)
        metrics.update(self.timer.metrics())
        metrics.update(step_throughput(self.timer.seconds["generate"], self.timer.seconds["learn"], generated,
                                       self.learner_tokens, self.parameter_count, self.reference is not None,
                                       self.device))
        self.log_dict(metrics, prog_bar=False, on_step=True)
        self.log("reward", metrics["train/reward_mean"], prog_bar=True, logger=False)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sampler"] = self.sampler.state_dict()
        if self.replay is not None:
            checkpoint["replay"] = self.replay.state_dict()
        checkpoint["rollout_generator"] = self.rollout_generator.get_state()
        checkpoint["tool_availability"] = self.availability.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.sampler.load_state_dict(checkpoint["sampler"])
        if self.replay is not None and "replay" in checkpoint:
            self.replay.load_state_dict(checkpoint["replay"])
        self.rollout_generator.set_state(checkpoint["rollout_generator"])
        if "tool_availability" in checkpoint:  # absent in checkpoints written before tool schedules
            self.availability.load_state_dict(checkpoint["tool_availability"])
