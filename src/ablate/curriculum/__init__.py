"""Curricula (`conf/curriculum/`): prompt samplers for online RL, and rollout replay.

    none             uniform over the training pool
    static           paper 000 V1: cumulative stages on a clock (3-number prompts, then all)
    static_thirds    paper 001's baseline: easy, then medium, then hard thirds of training
    threshold        paper 001: a sliding window of rewards moves a difficulty level down / up
    frontier         paper 000 V2: weight floor + p(1-p), EMA of group success, explore unseen prompts
    frontier_replay  frontier + rehearsal of solved prompts (the fix paper 000 predicts)
    dots             paper 002: attention-predicted difficulty, sampled near alpha
Replay (paper 002, any sampler): `replay.enabled=true`, see `ablate.curriculum.replay`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Mapping, Sequence

import torch
from omegaconf import OmegaConf

from ablate.config import typed

from .difficulty import Levels, difficulty_levels, task_levels
from .dots import DotsSampler
from .replay import ReplayBuffer, ReplayGroup
from .samplers import (SAMPLERS, FrontierReplaySampler, FrontierSampler, Sampler, StaticSampler, ThresholdSampler,
                       success_rates)

for _module in pkgutil.iter_modules(__path__):  # a sampler class registers itself when its module is imported
    importlib.import_module(f"{__name__}.{_module.name}")
CURRICULA = tuple(SAMPLERS)  # the shipped ones; the checks read SAMPLERS, which later imports may extend

__all__ = ["CURRICULA", "SAMPLERS", "DotsSampler", "FrontierReplaySampler", "FrontierSampler", "Levels",
           "ReplayBuffer", "ReplayGroup", "Sampler", "StaticSampler", "ThresholdSampler", "build_sampler",
           "check_curriculum", "difficulty_levels", "engagement_warnings", "success_rates", "task_levels"]


def engagement_warnings(kind: str, metrics, c: Mapping[str, Any] | None = None) -> list[str]:
    """The sampler's warnings about a finished run (its metrics.csv as a DataFrame; `c` its curriculum
    config): see `Sampler.engagement`."""
    warning = SAMPLERS[kind].engagement(metrics, c)
    return [warning] if warning else []


def check_curriculum(c: Mapping[str, Any], fields: Sequence[str] | None = None, task: str = "") -> None:
    """ValueError naming the key when a curriculum config cannot work (run before any compute). `fields`:
    the difficulty fields the run's task offers (`Task.difficulty_fields`; None: not checked here)."""
    kind = c.get("kind", "none")
    sampler = SAMPLERS[kind]  # an unknown kind: ValueError listing the registered ones
    d = c.get("difficulty", {})
    if fields is not None and d.get("field", "n_numbers") not in fields:
        raise ValueError(f"curriculum.difficulty.field={d.get('field')!r}: expected one of {tuple(fields)}"
                         + (f" (the difficulty fields of task={task})" if task else ""))
    sampler.check(c)


def build_sampler(c: Mapping[str, Any] | None, problems: Sequence[Any], seed: int, max_steps: int,
                  embed: Callable[[], torch.Tensor] | None = None, *, task: Any) -> Sampler:
    """The sampler a curriculum config describes (None: uniform) over `task`'s prompts `problems` (the task
    gives their difficulty levels). `embed` gives DOTS its prompt embeddings. `c`: the composed `curriculum`
    (a preset typed by its own schema, e.g. static_thirds) or a plain mapping of the sampler's schema's keys."""
    c = c if c is not None else {"kind": "none"}
    cls = SAMPLERS.get(c.get("kind", "none"))
    schema = vars(cls).get("schema") if cls else None  # the sampler's own (a preset's subclass of it stays its own)
    config = typed(schema, c) if schema else c  # keys left out: the schema's defaults
    view = OmegaConf.structured(config) if schema else c  # what the checks read, by key
    check_curriculum(view, tuple(task.difficulty_fields), task.name)
    d = view.get("difficulty") or {}  # every sampler's: one level per value, or quantile bins (Task.difficulty_fields)
    levels = task_levels(task, problems, d.get("field", "n_numbers"), int(d.get("bins", 3)))
    return cls.from_config(config, levels, seed, max_steps, embed)
