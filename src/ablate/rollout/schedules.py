"""Tool availability over training (paper 003): p_tool(t), and the per-rollout Bernoulli draws.

`p_tool(step, total_steps, cfg)` is a pure function of the 0-based optimizer step t, the run's
length T (`stage.max_steps`) and the `tool` config; T_anneal = anneal_ratio * T.

| schedule | p_tool(t) |
|---|---|
| `off` | 0 |
| `on` | 1 |
| `anneal_linear` | max(0, 1 - t / T_anneal) (paper 003, section 3: T = 100, ratio 2/3 -> 0 from step 67) |
| `anneal_step` | 1 - floor(stages * t / T_anneal) / stages, and 0 from T_anneal on (stages = 1: on, then off) |
| `anneal_log` | max(0, 1 - ln(1 + t) / ln(1 + T_anneal)) (fast early withdrawal, 0 from T_anneal on) |

Paper 003 names the step and log schedules (its appendix E) without formulas; the two above are
ours, chosen to reach 0 at the same T_anneal as the linear schedule so that all three share the
tool-free tail and differ only in how the tool is withdrawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ablate.config.schemas import ToolConfig, config_schema

SCHEDULES = ("off", "on", "anneal_linear", "anneal_step", "anneal_log")
PROMPT_MODES = ("always", "when_available", "never")


@config_schema("tool", "annealed_schema")
@dataclass
class AnnealedToolConfig(ToolConfig):
    """conf/tool/anneal_linear.yaml, anneal_log.yaml: T_anneal's ratio."""

    name: str = "anneal_linear"
    schedule: str = "anneal_linear"
    anneal_ratio: float = 0.667


@config_schema("tool", "stepped_schema")
@dataclass
class SteppedToolConfig(AnnealedToolConfig):
    """conf/tool/anneal_step.yaml: and the number of steps down."""

    name: str = "anneal_step"
    schedule: str = "anneal_step"
    stages: int = 1


def anneal_steps(total_steps: int, ratio: float) -> float:
    """T_anneal = ratio * T: the step from which an annealed tool is never available."""
    return ratio * total_steps


def p_tool(step: int, total_steps: int, tool: ToolConfig) -> float:
    """Probability that the tool answers in a rollout of optimizer step `step` (0-based). `tool`: the `tool`
    config as its schema's instance (or the composed node); a schedule's own keys (`anneal_ratio`, `stages`)
    take their schemas' defaults where the tool's schema lacks them (tool=on with tool.schedule overridden)."""
    schedule = tool.schedule
    if schedule == "off":
        return 0.0
    if schedule == "on":
        return 1.0
    horizon = anneal_steps(total_steps, float(getattr(tool, "anneal_ratio", AnnealedToolConfig.anneal_ratio)))
    if schedule not in SCHEDULES:
        raise ValueError(f"tool.schedule={schedule!r}: expected one of {SCHEDULES}")
    if step >= horizon:
        return 0.0
    if schedule == "anneal_linear":
        return max(0.0, 1.0 - step / horizon)
    if schedule == "anneal_step":
        stages = int(getattr(tool, "stages", SteppedToolConfig.stages))
        return 1.0 - math.floor(stages * step / horizon) / stages
    return max(0.0, 1.0 - math.log1p(step) / math.log1p(horizon))  # anneal_log


def show_preamble(mode: str, available: bool) -> bool:
    """Whether a prompt carries the calculator preamble (paper 003's calculator_prompt_mode)."""
    if mode not in PROMPT_MODES:
        raise ValueError(f"tool.prompt={mode!r}: expected one of {PROMPT_MODES}")
    return mode == "always" or (mode == "when_available" and available)


class ToolAvailability:
    """Per-rollout availability ~ Bernoulli(p) from its own seeded generator, so that the draws
    neither depend on nor disturb token sampling; its state is checkpointed (a resumed run draws
    exactly what the uninterrupted one would). One uniform number is drawn per rollout whatever p
    is, so schedules that differ only in p consume the generator identically."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, n: int, p: float) -> list[bool]:
        return (torch.rand(n, generator=self.generator) < p).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["generator"])
