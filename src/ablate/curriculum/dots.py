"""DOTS (paper 002): predict every prompt's adaptive difficulty from a rolled-out reference set and
sample prompts near the target difficulty.

Adaptive difficulty d = the failure rate of a prompt's k samples. Every `every` steps the RL module
rolls out `reference_size` random prompts (`reference_prompts` / `observe_reference`); each prompt's
difficulty is predicted by attention over the reference set, a = softmax(z_q . z_i / sqrt(h)),
d_hat = sum_i a_i d_i, then Platt-calibrated, sigma(w * logit(d_hat) + b), with (w, b) fitted on the
reference set's leave-one-out predictions; P(q) ∝ exp(-|d_hat - alpha| / tau). Embeddings z come from
outside (the starting policy's mean-pooled hidden states by default): the sampler never sees a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from ablate.config.schemas import config_schema

from .difficulty import Difficulty, Levels
from .samplers import SAMPLERS, Sampler, success_rates

EPS = 1e-4


def attention_difficulty(queries: torch.Tensor, keys: torch.Tensor, difficulty: torch.Tensor,
                         exclude_self: bool = False) -> torch.Tensor:
    """sum_i softmax_i(q . k_i / sqrt(h)) d_i for each query row; `exclude_self` (queries == keys)
    gives leave-one-out predictions for the reference set itself."""
    scores = queries @ keys.T / math.sqrt(keys.shape[-1])
    if exclude_self:
        scores = scores.masked_fill(torch.eye(len(keys), dtype=torch.bool), float("-inf"))
    return torch.softmax(scores, dim=-1) @ difficulty


def logit(p: torch.Tensor) -> torch.Tensor:
    p = p.clamp(EPS, 1 - EPS)
    return torch.log(p) - torch.log1p(-p)


def fit_platt(predicted: torch.Tensor, observed: torch.Tensor, steps: int = 200, lr: float = 0.1) -> tuple[float, float]:
    """(w, b) minimising the cross-entropy of sigma(w * logit(predicted) + b) against the observed
    difficulties (soft labels in [0, 1]); starts at the identity map (1, 0)."""
    x = logit(predicted.double())
    params = torch.tensor([1.0, 0.0], dtype=torch.double, requires_grad=True)
    optimizer = torch.optim.LBFGS([params], lr=lr, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(params[0] * x + params[1], observed.double())
        loss.backward()
        return loss

    optimizer.step(closure)
    w, b = params.detach().tolist()
    return (w, b) if math.isfinite(w) and math.isfinite(b) else (1.0, 0.0)


def calibrate(predicted: torch.Tensor, w: float, b: float) -> torch.Tensor:
    return torch.sigmoid(w * logit(predicted) + b)


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation; NaN when either side is constant (no information, not perfect agreement)."""
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denominator = float(x.norm() * y.norm())
    return float(x @ y) / denominator if denominator > 0 else math.nan


def selection_weights(predicted: torch.Tensor, alpha: float, tau: float) -> torch.Tensor:
    """exp(-|d_hat - alpha| / tau), shifted so the largest weight is 1 (same distribution, no underflow)."""
    distance = (predicted.double() - alpha).abs()
    # Floored so that a small tau never leaves fewer non-zero weights than a batch needs.
    return torch.exp(-(distance - distance.min()) / tau).clamp_min(1e-300)


@config_schema("curriculum", "dots_schema")
@dataclass
class DotsCurriculum:
    name: str = "dots"
    kind: str = "dots"
    difficulty: Difficulty = field(default_factory=Difficulty)
    every: int = 10
    reference_size: int = 64
    alpha: float = 0.5
    tau: float = 0.1
    calibrate: bool = True
    embedding: str = "policy"
    success_reward: float = 1.0


@SAMPLERS.register
class DotsSampler(Sampler):
    name = "dots"
    schema = DotsCurriculum

    def __init__(self, levels: Levels, seed: int, embeddings: torch.Tensor, every: int = 10,
                 reference_size: int = 64, alpha: float = 0.5, tau: float = 0.1, calibrate: bool = True,
                 success_reward: float = 1.0):
        super().__init__(levels, seed, success_reward)
        if len(embeddings) != self.n:
            raise ValueError(f"DOTS needs one embedding per prompt: got {len(embeddings)} for {self.n} prompts")
        # Standardised per dimension: raw hidden states share a large common component that would
        # make every prompt attend to every reference prompt alike.
        z = embeddings.double()
        self.z = ((z - z.mean(0)) / z.std(0).clamp_min(1e-8)).float()
        self.every, self.reference_size = every, min(reference_size, self.n)
        self.alpha, self.tau, self.use_calibration = alpha, tau, calibrate
        self.predicted: torch.Tensor | None = None   # [N] calibrated d_hat, None before the first reference set
        self.platt = (1.0, 0.0)
        self.reference_pearson = math.nan            # leave-one-out, on the reference set
        self.batch_pearson = math.nan                # predicted vs observed on the prompts trained on
        self.reference_mean = math.nan

    @classmethod
    def check(cls, c: Mapping[str, Any]) -> None:
        if not (int(c["every"]) >= 1 and int(c["reference_size"]) >= 2 and float(c["tau"]) > 0):
            raise ValueError("curriculum: dots needs every >= 1, reference_size >= 2 and tau > 0")

    @classmethod
    def from_config(cls, c, levels, seed, max_steps, embed):
        if embed is None:
            raise ValueError("curriculum=dots needs prompt embeddings")
        return cls(levels, seed, embed(), c.every, c.reference_size, c.alpha, c.tau, c.calibrate, c.success_reward)

    def reference_prompts(self, step: int) -> list[int]:
        """The prompts to roll out for difficulty before this step's batch ([] on most steps)."""
        if step % self.every:
            return []
        return torch.randperm(self.n, generator=self.generator)[:self.reference_size].tolist()

    def observe_reference(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        observed = 1.0 - success_rates(rewards, self.success_reward)
        keys = self.z[torch.as_tensor(list(indices), dtype=torch.long)]
        loo = attention_difficulty(keys, keys, observed, exclude_self=True)
        self.platt = fit_platt(loo, observed) if self.use_calibration else (1.0, 0.0)
        self.reference_pearson = pearson(calibrate(loo, *self.platt), observed)
        self.reference_mean = observed.mean().item()
        raw = attention_difficulty(self.z, keys, observed)
        self.predicted = calibrate(raw, *self.platt) if self.use_calibration else raw

    def sample(self, batch: int, step: int) -> list[int]:
        if self.predicted is None:
            self.last = self._uniform(None, batch)
        else:
            self.last = self._draw(selection_weights(self.predicted, self.alpha, self.tau), batch)
        return self.last

    def update(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        if self.predicted is not None:
            observed = 1.0 - success_rates(rewards, self.success_reward)
            self.batch_pearson = pearson(self.predicted[torch.as_tensor(list(indices))], observed)

    def metrics(self) -> dict[str, float]:
        predicted = self.predicted
        return {**super().metrics(), "curriculum/dots_reference_pearson": self.reference_pearson,
                "curriculum/dots_batch_pearson": self.batch_pearson,
                "curriculum/dots_reference_difficulty": self.reference_mean,
                "curriculum/dots_mean_predicted": predicted.mean().item() if predicted is not None else math.nan}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "predicted": self.predicted, "platt": self.platt,
                "reference_pearson": self.reference_pearson, "reference_mean": self.reference_mean}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.predicted, self.platt = state["predicted"], tuple(state["platt"])
        self.reference_pearson, self.reference_mean = state["reference_pearson"], state["reference_mean"]
