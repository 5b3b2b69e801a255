"""Prompt samplers: which training prompts each RL step rolls out.

A sampler knows prompt indices, difficulty levels and rewards, never models. The RL module calls
`sample(batch, step)` before generating, `update(indices, rewards)` with the group rewards
[prompts, k] after scoring, and `metrics()` for the step's log; `state_dict` goes into the checkpoint,
so a resumed run continues the same curriculum. A sample counts as solved when its reward reaches
`success_reward` (1.0: the verifier's full score), so format-only credit is not success.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, Sequence

import pandas as pd
import torch

from ablate.config.schemas import config_schema, typed
from ablate.registry import Registry
from ablate.seeds import seed_of

from .difficulty import BinnedDifficulty, Difficulty, Levels, LevelStage


def success_rates(rewards: torch.Tensor, success_reward: float = 1.0) -> torch.Tensor:
    """Per-group fraction of samples that earned the full reward: [prompts, k] -> [prompts]."""
    return (rewards >= success_reward).float().mean(dim=-1)


# curriculum.kind -> sampler class, each registered under its `name` (`@SAMPLERS.register` on the class), so a
# new curriculum is its class and its schema (in any module of this package, which imports them all) and its
# yaml. A sampler's yaml is `@package _global_`: its schema is listed as `<name>_schema@curriculum`.
SAMPLERS = Registry("curriculum.kind")


@config_schema("curriculum", "none_schema")
@dataclass
class UniformCurriculum:
    name: str = "none"
    kind: str = "none"
    difficulty: Difficulty = field(default_factory=Difficulty)


@SAMPLERS.register
class Sampler:
    """Uniform sampling with replacement over a subset of the pool; subclasses choose the subset or the weights."""

    name = "none"
    schema: type = UniformCurriculum  # its `curriculum` config's dataclass; a subclass sets its own

    @classmethod
    def check(cls, c: Mapping[str, Any]) -> None:
        """ValueError naming the key when this sampler's `curriculum` config cannot work."""

    @classmethod
    def from_config(cls, c: Any, levels: Levels, seed: int, max_steps: int,
                    embed: Callable[[], torch.Tensor] | None) -> "Sampler":
        """The sampler a checked `curriculum` config describes, as an instance of the class's own `schema`
        (`build_sampler` types it; a sampler without a schema of its own gets the mapping); `embed()` gives
        prompt embeddings (DOTS)."""
        return cls(levels, seed)

    def __init__(self, levels: Levels, seed: int, success_reward: float = 1.0):
        self.levels = levels
        self.n = int(levels.of.numel())
        self.success_reward = success_reward
        self.generator = torch.Generator().manual_seed(seed_of("sampler", seed))
        self.last: list[int] = []

    def _uniform(self, pool: torch.Tensor | None, batch: int) -> list[int]:
        if pool is None:
            return torch.randint(self.n, (batch,), generator=self.generator).tolist()
        return pool[torch.randint(len(pool), (batch,), generator=self.generator)].tolist()

    def _draw(self, weights: torch.Tensor, batch: int) -> list[int]:
        """`batch` distinct prompts ∝ weights (fewer if fewer have a non-zero weight)."""
        n = min(batch, int((weights > 0).sum()))
        return torch.multinomial(weights, n, replacement=False, generator=self.generator).tolist() if n else []

    def sample(self, batch: int, step: int) -> list[int]:
        self.last = self._uniform(None, batch)
        return self.last

    def update(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        pass

    def reference_prompts(self, step: int) -> list[int]:
        """Prompts the learner rolls out and scores before this step's batch and hands to
        `observe_reference` (DOTS' reference set); none by default."""
        return []

    def observe_reference(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {f"curriculum/level_frac/{name}": frac for name, frac in self.levels.mix(self.last).items()}

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["generator"])

    @staticmethod
    def engagement(metrics: pd.DataFrame, c: Mapping[str, Any] | None = None) -> str | None:
        """A warning when a finished run's metrics.csv shows the sampler ended up doing what uniform
        sampling does (its mechanism never engaged); None when it engaged or has nothing to engage.
        `c`: the run's curriculum config (None: judged from the metrics alone)."""
        return None


def last_quarter(metrics: pd.DataFrame, column: str) -> pd.Series:
    """`column` over the last quarter of the logged steps (at least one row), NaNs dropped."""
    if column not in metrics:
        return pd.Series(dtype=float)
    rows = metrics.dropna(subset=[column]).sort_values("step")
    return rows[column].iloc[-max(1, len(rows) // 4):]


@config_schema("curriculum", "static_schema")
@dataclass
class StaticCurriculum:
    name: str = "static"
    kind: str = "static"
    difficulty: Difficulty = field(default_factory=Difficulty)
    stages: List[LevelStage] = field(default_factory=lambda: [LevelStage(0.5, [0]), LevelStage(1.0, [0, 1])])
    success_reward: float = 1.0


@config_schema("curriculum", "static_thirds_schema")
@dataclass
class StaticThirdsCurriculum(StaticCurriculum):
    """Paper 001's staged baseline: the static sampler over thirds of a binned difficulty."""

    name: str = "static_thirds"
    difficulty: BinnedDifficulty = field(default_factory=BinnedDifficulty)
    stages: List[LevelStage] = field(default_factory=lambda: [
        LevelStage(0.3333333333, [0]), LevelStage(0.6666666667, [1]), LevelStage(1.0, [2])])


@SAMPLERS.register
class StaticSampler(Sampler):
    """Paper 000 V1 (and paper 001's thirds): stages on a fixed clock, each a set of levels sampled
    uniformly. `stages` = [{until: fraction of max_steps, levels: [...]}, ...], cumulative or not as written."""

    name = "static"
    schema = StaticCurriculum  # and StaticThirdsCurriculum, its preset over binned difficulty

    def __init__(self, levels: Levels, seed: int, stages: Sequence[LevelStage | Mapping[str, Any]], max_steps: int,
                 success_reward: float = 1.0):
        super().__init__(levels, seed, success_reward)
        stages = [typed(LevelStage, s) for s in stages]
        self.stages = [(float(s.until), [int(x) for x in s.levels]) for s in stages]
        self.max_steps = max_steps
        self.pools = [levels.members(stage_levels) for _, stage_levels in self.stages]
        self.stage = 0

    @classmethod
    def check(cls, c: Mapping[str, Any]) -> None:
        stages = list(c.get("stages") or [])
        untils = [float(s["until"]) for s in stages]
        if not stages or any(not s.get("levels") for s in stages):
            raise ValueError("curriculum.stages must be a non-empty list of {until: fraction, levels: [...]}")
        if untils != sorted(untils) or not 0 < untils[0] or untils[-1] != 1.0:
            raise ValueError(f"curriculum.stages: `until` must increase and end at 1.0, got {untils}")

    @classmethod
    def from_config(cls, c, levels, seed, max_steps, embed):
        return cls(levels, seed, c.stages, max_steps, c.success_reward)

    def stage_at(self, step: int) -> int:
        for i, (until, _) in enumerate(self.stages):
            if step / self.max_steps < until - 1e-6:  # tolerance: `until: 0.6666666667` means 2/3
                return i
        return len(self.stages) - 1

    def sample(self, batch: int, step: int) -> list[int]:
        self.stage = self.stage_at(step)
        pool = self.pools[self.stage]
        self.last = self._uniform(pool if len(pool) else None, batch)
        return self.last

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "curriculum/stage": float(self.stage)}


@config_schema("curriculum", "threshold_schema")
@dataclass
class ThresholdCurriculum:
    name: str = "threshold"
    kind: str = "threshold"
    difficulty: BinnedDifficulty = field(default_factory=BinnedDifficulty)
    window: int = 48
    low: float = 0.24
    high: float = 0.30
    start_level: int = 0
    success_reward: float = 1.0


@SAMPLERS.register
class ThresholdSampler(Sampler):
    """Paper 001: the mean success rate of the last `window` groups (prompts; each group's rate is the
    fraction of its k samples that succeed) moves the level one down below `low`, one up above `high`;
    an empty level falls back to the whole pool. Paper 001's window counted samples (W = 10 of 256 per
    step), which makes the level a function of a handful of rollouts: it flips step to step."""

    name = "threshold"
    schema = ThresholdCurriculum

    def __init__(self, levels: Levels, seed: int, window: int = 10, low: float = 0.24, high: float = 0.30,
                 start_level: int = 0, success_reward: float = 1.0):
        super().__init__(levels, seed, success_reward)
        self.window: deque[float] = deque(maxlen=window)
        self.low, self.high = low, high
        self.level = min(max(start_level, 0), levels.count - 1)
        self.pools = [levels.members([i]) for i in range(levels.count)]
        self.fell_back = False

    @classmethod
    def check(cls, c: Mapping[str, Any]) -> None:
        if not 0 <= float(c["low"]) <= float(c["high"]) <= 1:
            raise ValueError(f"curriculum.low={c['low']}, high={c['high']}: need 0 <= low <= high <= 1")

    @classmethod
    def from_config(cls, c, levels, seed, max_steps, embed):
        return cls(levels, seed, c.window, c.low, c.high, c.start_level, c.success_reward)

    def window_mean(self) -> float:
        return sum(self.window) / len(self.window) if self.window else math.nan

    def sample(self, batch: int, step: int) -> list[int]:
        recent = self.window_mean()
        if recent < self.low:
            self.level = max(self.level - 1, 0)
        elif recent > self.high:
            self.level = min(self.level + 1, self.levels.count - 1)
        pool = self.pools[self.level]
        self.fell_back = len(pool) == 0
        self.last = self._uniform(None if self.fell_back else pool, batch)
        return self.last

    def update(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        self.window.extend(success_rates(rewards, self.success_reward).tolist())

    @staticmethod
    def engagement(metrics: pd.DataFrame, c: Mapping[str, Any] | None = None) -> str | None:
        level = last_quarter(metrics, "curriculum/level")
        if len(level) < 4:
            return None
        flips = float((level.diff().iloc[1:] != 0).mean())
        if flips > 0.5:
            return (f"threshold: the level changed at {flips:.0%} of the steps of the last quarter of training: the "
                    f"controller flips instead of tracking ({ThresholdSampler.why_flips(metrics, c)})")
        return None

    @staticmethod
    def why_flips(metrics: pd.DataFrame, c: Mapping[str, Any] | None) -> str:
        """The fix to name. When no level the run visited (2+ steps) succeeds inside low..high, the controller
        cannot hold any level (paper 001 on Countdown: success jumps from ~0.6 to ~0.15 between adjacent levels)."""
        columns = ["curriculum/level", "train/verdict/correct"]
        if c is None or not set(columns) <= set(metrics):
            return "a longer curriculum.window or a wider low..high band"
        rows = metrics.dropna(subset=columns).groupby(columns[0])[columns[1]].agg(["mean", "size"])
        success = rows.loc[rows["size"] >= 2, "mean"]
        low, high = float(c["low"]), float(c["high"])
        if success.empty or success.between(low, high).any():
            return "a longer curriculum.window or a wider low..high band"
        seen = ", ".join(f"{int(k)}: {v:.2f}" for k, v in success.items())
        return (f"no level it visited succeeds inside curriculum.low..high = {low:g}..{high:g} (success by level: "
                f"{seen}), so it cannot hold one: a band around one level's success, or levels that split the jump")

    def metrics(self) -> dict[str, float]:
        recent = self.window_mean()  # in_band: the controller holds its target (a slow cycle changes level rarely)
        return {**super().metrics(), "curriculum/level": float(self.level), "curriculum/window_mean": recent,
                "curriculum/in_band": float(self.low <= recent <= self.high) if recent == recent else math.nan,
                "curriculum/fell_back": float(self.fell_back)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "window": list(self.window), "level": self.level}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.window.clear()
        self.window.extend(state["window"])
        self.level = int(state["level"])


@config_schema("curriculum", "frontier_schema")
@dataclass
class FrontierCurriculum:
    name: str = "frontier"
    kind: str = "frontier"
    difficulty: Difficulty = field(default_factory=Difficulty)
    floor: float = 0.05
    w_explore: float = 4.0
    ema: float = 0.5
    success_reward: float = 1.0


@SAMPLERS.register
class FrontierSampler(Sampler):
    """Paper 000 V2: weight floor + p(1-p) per prompt, w_explore for prompts never rolled out, p the EMA
    (weight `ema` on the newest) of the prompt's group success rate; a batch is drawn without replacement."""

    name = "frontier"
    schema = FrontierCurriculum

    def __init__(self, levels: Levels, seed: int, floor: float = 0.05, w_explore: float = 4.0, ema: float = 0.5,
                 success_reward: float = 1.0):
        super().__init__(levels, seed, success_reward)
        self.floor, self.w_explore, self.ema = floor, w_explore, ema
        self.p_hat = torch.full((self.n,), math.nan)
        self.explored = math.nan  # fraction of the last batch never rolled out before

    @classmethod
    def check(cls, c: Mapping[str, Any]) -> None:
        if not (0 < float(c["ema"]) <= 1 and float(c["floor"]) >= 0):
            raise ValueError(f"curriculum.ema={c['ema']} must be in (0, 1] and curriculum.floor={c['floor']} >= 0")

    @classmethod
    def from_config(cls, c, levels, seed, max_steps, embed):
        return cls(levels, seed, c.floor, c.w_explore, c.ema, c.success_reward)

    def weights(self) -> torch.Tensor:
        seen = ~torch.isnan(self.p_hat)
        return torch.where(seen, self.floor + self.p_hat * (1 - self.p_hat), torch.full_like(self.p_hat, self.w_explore))

    def sample(self, batch: int, step: int) -> list[int]:
        self.last = self._draw(self.weights(), batch)
        self._note_explored()
        return self.last

    def _note_explored(self) -> None:
        self.explored = torch.isnan(self.p_hat[self.last]).float().mean().item() if self.last else math.nan

    def update(self, indices: Sequence[int], rewards: torch.Tensor) -> None:
        observed = success_rates(rewards, self.success_reward)
        for i, rate in zip(indices, observed.tolist()):
            old = self.p_hat[i]
            self.p_hat[i] = rate if torch.isnan(old) else (1 - self.ema) * old + self.ema * rate

    def metrics(self) -> dict[str, float]:
        seen = ~torch.isnan(self.p_hat)
        return {**super().metrics(), "curriculum/seen_frac": seen.float().mean().item(),
                "curriculum/mean_p_hat": self.p_hat[seen].mean().item() if seen.any() else math.nan,
                "curriculum/explore_frac": self.explored}

    @staticmethod
    def engagement(metrics: pd.DataFrame, c: Mapping[str, Any] | None = None) -> str | None:
        explore = last_quarter(metrics, "curriculum/explore_frac")
        if len(explore) >= 4 and float(explore.mean()) > 0.9:  # shorter runs are too short to judge
            return (f"frontier: {explore.mean():.0%} of the prompts drawn over the last quarter of training had never "
                    "been rolled out: the sampler behaved as uniform sampling without repeats and its weights never "
                    "engaged (a smaller stage.pool_size or curriculum.w_explore engages them)")
        return None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "p_hat": self.p_hat.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.p_hat = state["p_hat"].clone()


@config_schema("curriculum", "frontier_replay_schema")
@dataclass
class FrontierReplayCurriculum(FrontierCurriculum):
    name: str = "frontier_replay"
    kind: str = "frontier_replay"
    rehearsal: float = 0.25
    solved_at: float = 0.75


@SAMPLERS.register
class FrontierReplaySampler(FrontierSampler):
    """Frontier plus solved-prompt rehearsal (the fix paper 000 predicts for V2's forgetting): a fixed
    fraction `rehearsal` of every batch is drawn uniformly from the prompts whose p is at least `solved_at`
    (when there are any); the rest of the batch follows the frontier weights, without repeats."""

    name = "frontier_replay"
    schema = FrontierReplayCurriculum

    def __init__(self, levels: Levels, seed: int, floor: float = 0.05, w_explore: float = 4.0, ema: float = 0.5,
                 rehearsal: float = 0.25, solved_at: float = 0.75, success_reward: float = 1.0):
        super().__init__(levels, seed, floor, w_explore, ema, success_reward)
        self.rehearsal, self.solved_at = rehearsal, solved_at
        self.rehearsed = 0

    @classmethod
    def check(cls, c: Mapping[str, Any]) -> None:
        super().check(c)
        if not 0 <= float(c["rehearsal"]) < 1:
            raise ValueError(f"curriculum.rehearsal={c['rehearsal']} must be in [0, 1)")

    @classmethod
    def from_config(cls, c, levels, seed, max_steps, embed):
        return cls(levels, seed, c.floor, c.w_explore, c.ema, c.rehearsal, c.solved_at, c.success_reward)

    def sample(self, batch: int, step: int) -> list[int]:
        solved = torch.nonzero(self.p_hat >= self.solved_at).flatten()  # NaN compares False: unseen is not solved
        n_rehearse = min(round(self.rehearsal * batch), len(solved))
        rehearse = solved[torch.randperm(len(solved), generator=self.generator)[:n_rehearse]].tolist()
        weights = self.weights()
        weights[rehearse] = 0.0
        self.rehearsed = n_rehearse
        self.last = rehearse + self._draw(weights, batch - n_rehearse)
        self._note_explored()
        return self.last

    def metrics(self) -> dict[str, float]:
        solved = (self.p_hat >= self.solved_at).float().sum().item()
        return {**super().metrics(), "curriculum/rehearsed": float(self.rehearsed), "curriculum/solved": solved}
