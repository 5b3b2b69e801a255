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

from typing import Any, Callable, Mapping, Sequence

import torch

from ablate.tasks.countdown import Problem

from .difficulty import FIELDS, Levels, difficulty_levels
from .dots import DotsSampler
from .replay import ReplayBuffer, ReplayGroup
from .samplers import (FrontierReplaySampler, FrontierSampler, Sampler, StaticSampler, ThresholdSampler,
                       success_rates)

SAMPLERS: dict[str, type[Sampler]] = {"none": Sampler, "static": StaticSampler, "threshold": ThresholdSampler,
                                       "frontier": FrontierSampler, "frontier_replay": FrontierReplaySampler,
                                       "dots": DotsSampler}
CURRICULA = tuple(SAMPLERS)

__all__ = ["CURRICULA", "FIELDS", "DotsSampler", "FrontierReplaySampler", "FrontierSampler", "Levels", "ReplayBuffer",
           "ReplayGroup", "Sampler", "StaticSampler", "ThresholdSampler", "build_sampler", "check_curriculum",
           "difficulty_levels", "engagement_warnings", "success_rates"]


def engagement_warnings(kind: str, metrics) -> list[str]:
    """The sampler's warnings about a finished run (its metrics.csv as a DataFrame): see `Sampler.engagement`."""
    warning = SAMPLERS[kind].engagement(metrics)
    return [warning] if warning else []


def check_curriculum(c: Mapping[str, Any]) -> None:
    """ValueError naming the key when a curriculum config cannot work (run before any compute)."""
    kind = c.get("kind", "none")
    if kind not in CURRICULA:
        raise ValueError(f"curriculum.kind={kind!r}: expected one of {CURRICULA}")
    d = c.get("difficulty", {})
    if d.get("field", "n_numbers") not in FIELDS:
        raise ValueError(f"curriculum.difficulty.field={d.get('field')!r}: expected one of {FIELDS}")
    if kind == "static":
        stages = list(c.get("stages") or [])
        untils = [float(s["until"]) for s in stages]
        if not stages or any(not s.get("levels") for s in stages):
            raise ValueError("curriculum.stages must be a non-empty list of {until: fraction, levels: [...]}")
        if untils != sorted(untils) or not 0 < untils[0] or untils[-1] != 1.0:
            raise ValueError(f"curriculum.stages: `until` must increase and end at 1.0, got {untils}")
    if kind == "threshold" and not 0 <= float(c["low"]) <= float(c["high"]) <= 1:
        raise ValueError(f"curriculum.low={c['low']}, high={c['high']}: need 0 <= low <= high <= 1")
    if kind in ("frontier", "frontier_replay") and not (0 < float(c["ema"]) <= 1 and float(c["floor"]) >= 0):
        raise ValueError(f"curriculum.ema={c['ema']} must be in (0, 1] and curriculum.floor={c['floor']} >= 0")
    if kind == "frontier_replay" and not 0 <= float(c["rehearsal"]) < 1:
        raise ValueError(f"curriculum.rehearsal={c['rehearsal']} must be in [0, 1)")
    if kind == "dots" and not (int(c["every"]) >= 1 and int(c["reference_size"]) >= 2 and float(c["tau"]) > 0):
        raise ValueError("curriculum: dots needs every >= 1, reference_size >= 2 and tau > 0")


def build_sampler(c: Mapping[str, Any] | None, problems: Sequence[Problem], seed: int, max_steps: int,
                  embed: Callable[[], torch.Tensor] | None = None) -> Sampler:
    """The sampler a curriculum config describes (None: uniform). `embed` gives DOTS its prompt embeddings."""
    c = dict(c or {"kind": "none"})
    check_curriculum(c)
    d = c.get("difficulty", {})
    levels = difficulty_levels(problems, d.get("field", "n_numbers"), int(d.get("bins", 3)))
    success = float(c.get("success_reward", 1.0))
    kind = c.get("kind", "none")
    if kind == "static":
        return StaticSampler(levels, seed, c["stages"], max_steps, success)
    if kind == "threshold":
        return ThresholdSampler(levels, seed, int(c["window"]), float(c["low"]), float(c["high"]),
                                int(c.get("start_level", 0)), success)
    if kind == "frontier":
        return FrontierSampler(levels, seed, float(c["floor"]), float(c["w_explore"]), float(c["ema"]), success)
    if kind == "frontier_replay":
        return FrontierReplaySampler(levels, seed, float(c["floor"]), float(c["w_explore"]), float(c["ema"]),
                                     float(c["rehearsal"]), float(c["solved_at"]), success)
    if kind == "dots":
        if embed is None:
            raise ValueError("curriculum=dots needs prompt embeddings")
        return DotsSampler(levels, seed, embed(), int(c["every"]), int(c["reference_size"]), float(c["alpha"]),
                           float(c["tau"]), bool(c.get("calibrate", True)), success)
    return Sampler(levels, seed, success)
