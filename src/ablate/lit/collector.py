"""Collection for the RL learner (`ablate.lit.rloo`): one step's batch from the prompt sampler, the rollout
engine and the task's verifier (`ablate.tasks.base.Task.score`), with the optional replay buffer, DAPO's dynamic
sampling and a sampler's reference set (DOTS), and the metrics that describe what was generated. No model, no
optimizer: the learner gets a `Collected` and learns from it. The engine, task, sampler and replay buffer are
injected; this module imports none of them by name, and the task and the tool name their own metrics
(`ablate.tasks.base.rollout_metrics`, the tool class's `rollout_metrics`).

Tools (paper 003): each rollout of step t gets the engine's tool with probability p_tool(t) (the
`tool.schedule`), drawn from a checkpointed generator of its own; with `tool.prompt=when_available` its
prompt says so (the tool's decoration), so the k prompts of a group may differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from ablate.config.schemas import ToolConfig
from ablate.lit import overlong
from ablate.lit.rollout_batch import Collected, FreshGroups, PhaseTimer
from ablate.rollout import Rollouts, SamplingParams
from ablate.rollout.schedules import ToolAvailability, p_tool
from ablate.rollout.tools import ToolPrompt
from ablate.seeds import rank_seed, seed_of
from ablate.tasks import Task
from ablate.tasks.base import rollout_metrics


class Collector:
    """Owns what collection draws from and checkpoints: the prompt pool, the sampler, the replay buffer,
    the rollout generator and the tool's availability draws."""

    def __init__(self, problems: Sequence[Any], engine: Any, task: Task, sampler: Any,
                 stage: Any, seed: int, tokenizer: PreTrainedTokenizerBase,
                 template: str, replay: Any = None, tool: ToolConfig | None = None,
                 dynamic_sampling: Any = None):
        self.stage = stage  # the rloo stage's RLOOStageConfig (ablate.stages.rloo), typed by the stage
        self.problems = list(problems)
        self.engine, self.task, self.sampler, self.replay = engine, task, sampler, replay
        self.dynamic = dynamic_sampling  # the `dynamic_sampling` config's DynamicSamplingConfig (ablate.stages.rloo); None: off
        self.levels = sorted({task.level(p) for p in self.problems} - {None})  # the report levels of the pool
        self.params = SamplingParams(**dataclasses.asdict(self.stage.sampling))
        self.seed = seed
        self.rollout_generator = torch.Generator().manual_seed(seed_of("rollout", seed))
        self.tool = tool if tool is not None else ToolConfig()  # the `tool` config's schema instance; None: no tool
        self.prompt = ToolPrompt(self.tool, template, tokenizer, task)  # the tool decorates the task's prompts
        self.availability = ToolAvailability(seed_of("availability", seed))
        self.eos_id = tokenizer.eos_token_id

    def collect(self, step: int, timer: PhaseTimer | None = None) -> Collected:
        """Sampler -> engine -> verifier -> replay: the batch step `step` learns from, and what describes it.
        A sampler's reference prompts (DOTS) are rolled out and scored first (`time/reference_s`). Without
        dynamic sampling one batch of fresh prompts; with it (DAPO's filter-and-refill, after verl's
        `filter_groups`) further batches (the sampler sees every group) until enough informative groups or
        `max_gen_batches` batches (`filtered`)."""
        timer = timer or PhaseTimer()
        with timer("reference"):
            reference = self.sampler.reference_prompts(step)
            if reference:  # timed as the reference alone, not as generation
                self.sampler.observe_reference(reference, self.roll_out(reference, step, PhaseTimer()).rewards)
        n_prompts = self.stage.batch_prompts
        n_replay = self.replay.replay_count(n_prompts) if self.replay is not None else 0
        n, batches, first_generate_s = n_prompts - n_replay, [], 0.0
        while self._wants_more(batches, n):
            with timer("generate"):
                indices = self.sampler.sample(n, step)
            batches.append(self.roll_out(indices, step, timer))
            with timer("score"):
                self.sampler.update(indices, batches[-1].rewards)
            if len(batches) == 1:  # what generating beyond the first batch costs: dynamic/extra_generate_s
                first_generate_s = timer.seconds["generate"]
        seen = FreshGroups.concat(batches)
        kept, metrics = seen, {}
        if self.dynamic is not None and self.dynamic.enabled:
            kept, metrics = filtered(seen, n, len(batches))
            metrics["dynamic/extra_generate_s"] = timer.seconds["generate"] - first_generate_s
        rollouts, rewards = self._with_replay(kept, n_replay, step, metrics)
        if overlong.engaged(self.stage):  # DAPO's overlong shaping: on what is learnt from, after the filter
            rewards, shaping = overlong.shaped_rewards(rollouts, rewards, self.stage)
            metrics.update(shaping)
            metrics["train/truncated_frac"] = overlong.truncated(seen.rollouts, self.eos_id).float().mean().item()
        return Collected(seen, rollouts, rewards, self.describe(seen, rollouts, rewards, step, metrics))

    def roll_out(self, indices: Sequence[int], step: int, timer: PhaseTimer) -> FreshGroups:
        """The prompts `indices`, k rollouts each (one prompt per rollout, prompt-major, since its decoration
        follows each rollout's tool draw), scored by the task's verifier."""
        problems, k = [self.problems[i] for i in indices], self.stage.k
        with timer("generate"):
            available = self.availability.draw(len(problems) * k, self.p_available(step))
            prompts = [self.prompt.ids(problems[i // k], a) for i, a in enumerate(available)]
            rollouts = self.engine.generate(prompts, 1, self.params, self.rollout_generator, tool_available=available)
            rollouts = dataclasses.replace(rollouts, k=k)
        with timer("score"):
            scores = [self.task.score(problems[i // k], text) for i, text in enumerate(rollouts.texts)]
        rewards = torch.tensor([reward for reward, _ in scores], dtype=torch.float32).view(len(problems), k)
        return FreshGroups(list(indices), problems, rollouts, rewards, [verdict for _, verdict in scores], available)

    def p_available(self, step: int) -> float:
        return p_tool(step, self.stage.max_steps, self.tool)

    def _with_replay(self, kept: FreshGroups, n_replay: int, step: int,
                     metrics: dict[str, float]) -> tuple[Rollouts, torch.Tensor]:
        """The kept fresh groups plus `n_replay` replayed ones (stored with their own behaviour log-probs);
        the kept groups join the buffer. Adds the `replay/` metrics to `metrics`."""
        if self.replay is None:
            return kept.rollouts, kept.rewards
        rollouts, rewards = kept.rollouts, kept.rewards
        replayed = self.replay.take(n_replay)
        stored = self.replay.add(kept.indices, kept.rollouts, kept.rewards, kept.verdicts, step)
        if replayed:
            rollouts = Rollouts.concat([kept.rollouts] + [g.rollouts for g in replayed])
            rewards = torch.cat([kept.rewards, torch.tensor([g.rewards for g in replayed])])
        metrics.update({"replay/replayed_frac": len(replayed) / self.stage.batch_prompts,
                        "replay/buffer_size": len(self.replay), "replay/stored": stored,
                        "replay/mean_age": sum(step - g.step for g in replayed) / len(replayed) if replayed else 0.0})
        return rollouts, rewards

    def _wants_more(self, batches: Sequence[FreshGroups], n: int) -> bool:
        if not batches:
            return True
        if self.dynamic is None or not self.dynamic.enabled or len(batches) >= self.dynamic.max_gen_batches:
            return False
        return sum(int(b.informative().sum()) for b in batches) < n

    def describe(self, seen: FreshGroups, rollouts: Rollouts, rewards: torch.Tensor, step: int,
                 collection: Mapping[str, float]) -> dict[str, float]:
        """The step's collection metrics: reward, verdicts, levels and tool use of everything freshly generated
        (`seen`: the current policy), the batch learnt from (`rollouts`, `rewards`), the sampler's and
        `collection`'s (dynamic/, replay/, overlong shaping)."""
        metrics = {
            "train/reward_mean": seen.rewards.mean().item(),
            "train/reward_std": seen.rewards.std().item(),
            "train/effective_prompt_frac": (rewards.std(dim=-1) > 0).float().mean().item(),
            "train/response_length": sum(len(c) for c in rollouts.completion_ids) / len(rollouts.completion_ids),
        }
        metrics.update(self.sampler.metrics())
        metrics.update(collection)
        levels = [self.task.level(p) for p in seen.problems]
        for n in self.levels:  # the difficulty mix of the fresh prompts, comparable across samplers
            metrics[f"curriculum/frac_n{n}"] = sum(level == n for level in levels) / max(len(seen.problems), 1)
        texts, calls = seen.rollouts.texts, seen.rollouts.tool_calls
        metrics.update({"tool/p_available": self.p_available(step), "tool/available_frac": sum(seen.available) / len(texts),
                        "tool/calls_per_rollout": sum(calls) / len(texts) if calls else 0.0})
        metrics.update(self.prompt.tool_class.rollout_metrics(texts))  # the tool's own
        metrics.update({k: v for k, v in seen.rollouts.stats.items() if k.startswith("rollout/")})  # the engine's
        metrics.update(rollout_metrics(self.task, levels, seen.rewards, seen.verdicts, self.levels))  # the task's
        return metrics

    def sync(self, model: torch.nn.Module) -> None:
        """The engine takes the policy's weights (after each step's updates, and at the start: on resume
        the checkpoint's, loaded since an engine holding its own copy, rollout=vllm, was built)."""
        self.engine.sync(model)

    def reseed(self, rank: int, step: int) -> None:
        """Data-parallel ranks sample their own prompts and rollouts (the checkpoint holds rank 0's
        generators, so a resumed worker re-derives its own from the step it resumes at)."""
        for generator in (self.rollout_generator, self.sampler.generator, self.availability.generator):
            generator.manual_seed(rank_seed(self.seed, rank, step))

    def state_dict(self) -> dict[str, Any]:
        state = {"sampler": self.sampler.state_dict()}
        if self.replay is not None:
            state["replay"] = self.replay.state_dict()
        state.update(rollout_generator=self.rollout_generator.get_state(),
                     tool_availability=self.availability.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.replay is not None and "replay" in state:
            self.replay.load_state_dict(state["replay"])
        self.rollout_generator.set_state(state["rollout_generator"])
        if "tool_availability" in state:  # absent in checkpoints written before tool schedules
            self.availability.load_state_dict(state["tool_availability"])


def filtered(seen: FreshGroups, n: int, batches: int) -> tuple[FreshGroups, dict[str, float]]:
    """Dynamic sampling's batch: the first n informative groups of `seen`, in generation order, topped up with
    uninformative ones where the cap on batches left fewer (verl raises there instead), so every step trains
    on n groups; and its `dynamic/` metrics."""
    informative = seen.informative()
    good = torch.nonzero(informative).flatten().tolist()[:n]
    filler = torch.nonzero(~informative).flatten().tolist()[:n - len(good)]
    return seen.groups(sorted(good + filler)), {"dynamic/gen_batches": float(batches),
                                                "dynamic/kept_frac": float(informative.float().mean()),
                                                "dynamic/topped_up_frac": len(filler) / n}
