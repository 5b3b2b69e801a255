"""Schemas of config groups (Hydra structured configs): a group's yaml lists its schema first in its
`defaults`, so a value of the wrong type or a key the schema lacks fails at composition, with Hydra's own
message naming the key. Range checks stay with each part (`ablate.eval.check_eval`,
`ablate.rollout.engines.check_rollout`). Registered in Hydra's ConfigStore on import (`ablate.config` imports this).

Each schema's fields are exactly its yaml's keys with the yaml's types, so a composed config holds the
same values as before schemas (the upstream cache keys hash them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Type, TypeVar, Union

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

T = TypeVar("T")


def typed(schema: Type[T], values: Union[T, Mapping[str, Any]]) -> T:
    """`values` (a composed group config, a plain dict, or already a `schema`) as a `schema` instance,
    which a part reads by attribute (`stage.kl_coef`): keys it lacks take the schema's defaults (the
    shipped values), a wrong type or an unknown key raises (omegaconf's ValidationError or ConfigKeyError)."""
    if isinstance(values, schema):
        return values
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))


@dataclass
class EvalConfig:
    enabled: bool = True
    n: int = 16
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    max_new_tokens: int = 96
    batch_size: int = 512
    ks: List[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    save_completions: int = 4
    regimes: Optional[List[str]] = None
    limit: Optional[int] = None
    every: Optional[int] = None
    val_size: int = 200
    val_n: int = 4
    val_regime: str = "auto"


@dataclass
class HFRolloutConfig:
    name: str = "hf"
    batch_size: int = 256
    compile: bool = False


@dataclass
class VLLMRolloutConfig:
    name: str = "vllm"
    dtype: str = "float32"
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.3
    kv_cache_memory_bytes: Optional[int] = 268435456
    max_model_len: Optional[int] = None
    enable_prefix_caching: bool = True
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)


# --- task ---------------------------------------------------------------------------------------------

@dataclass
class GeneratorConfig:
    counts: List[int] = field(default_factory=lambda: [3, 4])
    min_number: int = 1
    max_number: int = 99
    min_target: int = 1
    max_target: int = 99


@dataclass
class HubTaskConfig:
    path: str = "asingh15/countdown_tasks_3to4"
    name: Optional[str] = None
    split: str = "train"
    numbers_column: str = "nums"
    target_column: str = "target"


@dataclass
class FileTaskConfig:
    path: Optional[str] = None
    numbers_column: str = "nums"
    target_column: str = "target"


@dataclass
class TaskConfig:
    name: str = "countdown"
    source: str = "generated"
    pool_size: int = 10000
    data_seed: int = 0
    test_size: int = 500
    test_pool: int = 5000
    test_seed: int = 1234
    drop_unsolvable: bool = True
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    hub: HubTaskConfig = field(default_factory=HubTaskConfig)
    file: FileTaskConfig = field(default_factory=FileTaskConfig)


@dataclass
class ReasoningGymTaskConfig:
    """conf/task/<option>.yaml of a reasoning-gym task (ablate.tasks.reasoning_gym; its schema:
    `defaults: [reasoning_gym_schema]`); the defaults are conf/task/chain_sum.yaml's values."""

    name: str = "reasoning_gym"
    dataset: str = "chain_sum"
    config: Dict[str, Any] = field(default_factory=lambda: {"min_terms": 2, "max_terms": 3, "min_digits": 1,
                                                            "max_digits": 2})  # the generator's own config fields
    pool_size: int = 10000
    data_seed: int = 0
    test_size: int = 500
    test_pool: int = 5000
    test_seed: int = 1234
    operands: Optional[str] = "num_terms"  # metadata field counting the operands: the report level (null: none)
    prompt: str = "{expression} ="  # the compact template's prompt: a format string over question and metadata


# --- stage: one schema per kind of stage (ipo is dpo with other values) --------------------------------

@dataclass
class SFTStageConfig:
    name: str = "sft"
    trace: str = "plain"
    pool_size: int = 50000
    batch_size: int = 64
    max_steps: int = 1500
    max_length: int = 128
    lr: float = 3.0e-3
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    warmup_steps: int = 100
    grad_clip: float = 1.0
    checkpoint_every: int = 250


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64


@dataclass
class RLOOStageConfig:
    name: str = "rloo"
    init: str = "sft"
    pool_size: int = 10000
    batch_prompts: int = 16
    k: int = 8
    max_steps: int = 100
    lr: float = 1.0e-4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batch: int = 64
    micro_batch_tokens: Optional[int] = None  # micro-batches by padded-token budget (null: micro_batch sequences)
    ppo_epochs: int = 1  # passes over each collected batch (verl ppo_epochs, TRL num_iterations; ablate.lit.updates)
    ppo_mini_batches: int = 1  # optimizer steps per pass, each on a run of whole groups
    advantage: str = "rloo"
    advantage_scale: str = "none"
    is_level: str = "sequence"
    is_mode: str = "truncate"
    is_clip: float = 2.0
    is_low: float = 0.0
    clip_eps: float = 0.2
    clip_eps_low: Optional[float] = None
    clip_eps_high: Optional[float] = None
    dual_clip: Optional[float] = None
    aggregation: str = "token_mean"
    kl_estimator: str = "k3"
    kl_coef: float = 1.0e-3
    reference_dtype: str = "float32"
    entropy_coef: float = 1.0e-3
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    mask_truncated: bool = False
    checkpoint_every: int = 25
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class PairStage:
    until: float = 1.0
    n_numbers: Optional[List[int]] = None


@dataclass
class PairMix:
    wrong_value: float = 0.5
    wrong_numbers: float = 0.25
    substitution: float = 0.25


@dataclass
class SolverPairsConfig:
    trace: str = "plain"
    mix: PairMix = field(default_factory=PairMix)


@dataclass
class SampledPairsConfig:
    n: int = 4
    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 96
    margin: float = 0.5
    max_pairs_per_prompt: int = 2


@dataclass
class FilePairsConfig:
    path: Optional[str] = None


@dataclass
class PairsConfig:
    source: str = "sampled"
    n_prompts: int = 2000
    order: str = "none"
    stages: List[PairStage] = field(default_factory=lambda: [PairStage(0.5, [3]), PairStage(1.0, [3, 4])])
    solver: SolverPairsConfig = field(default_factory=SolverPairsConfig)
    sampled: SampledPairsConfig = field(default_factory=SampledPairsConfig)
    file: FilePairsConfig = field(default_factory=FilePairsConfig)


@dataclass
class PreferenceStageConfig:
    name: str = "dpo"
    init: str = "sft"
    pool_size: int = 10000
    beta: float = 0.25
    label_smoothing: float = 0.0
    average_logps: bool = False
    batch_size: int = 32
    max_steps: int = 120
    max_length: int = 160
    lr: float = 3.0e-5
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    warmup_steps: int = 10
    grad_clip: float = 1.0
    checkpoint_every: int = 50
    pairs: PairsConfig = field(default_factory=PairsConfig)


# --- tool: one schema per shape of tool config (the schedule's parameters, the oracle's) ----------------

@dataclass
class ToolConfig:
    name: str = "off"
    kind: str = "calculator"
    schedule: str = "off"
    prompt: str = "when_available"
    max_calls: int = 8


@dataclass
class AnnealedToolConfig(ToolConfig):
    name: str = "anneal_linear"
    schedule: str = "anneal_linear"
    anneal_ratio: float = 0.667


@dataclass
class SteppedToolConfig(AnnealedToolConfig):
    name: str = "anneal_step"
    schedule: str = "anneal_step"
    stages: int = 1


@dataclass
class OracleToolConfig(ToolConfig):
    name: str = "oracle"
    kind: str = "oracle"
    schedule: str = "on"
    prompt: str = "never"
    max_messages: int = 20
    mistake_rate: float = 0.05


# --- curriculum: one schema per sampler (its yaml is `@package _global_`: the schema sits at `curriculum`) --

@dataclass
class Difficulty:
    field: str = "n_numbers"


@dataclass
class BinnedDifficulty:
    field: str = "hardness"
    bins: int = 3


@dataclass
class LevelStage:
    until: float = 1.0
    levels: List[int] = field(default_factory=lambda: [0])


@dataclass
class UniformCurriculum:
    name: str = "none"
    kind: str = "none"
    difficulty: Difficulty = field(default_factory=Difficulty)


@dataclass
class StaticCurriculum:
    name: str = "static"
    kind: str = "static"
    difficulty: Difficulty = field(default_factory=Difficulty)
    stages: List[LevelStage] = field(default_factory=lambda: [LevelStage(0.5, [0]), LevelStage(1.0, [0, 1])])
    success_reward: float = 1.0


@dataclass
class StaticThirdsCurriculum(StaticCurriculum):
    name: str = "static_thirds"
    difficulty: BinnedDifficulty = field(default_factory=BinnedDifficulty)
    stages: List[LevelStage] = field(default_factory=lambda: [
        LevelStage(0.3333333333, [0]), LevelStage(0.6666666667, [1]), LevelStage(1.0, [2])])


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


@dataclass
class FrontierCurriculum:
    name: str = "frontier"
    kind: str = "frontier"
    difficulty: Difficulty = field(default_factory=Difficulty)
    floor: float = 0.05
    w_explore: float = 4.0
    ema: float = 0.5
    success_reward: float = 1.0


@dataclass
class FrontierReplayCurriculum(FrontierCurriculum):
    name: str = "frontier_replay"
    kind: str = "frontier_replay"
    rehearsal: float = 0.25
    solved_at: float = 0.75


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


# (group, name in the group, schema): a yaml lists `<name>` first in its `defaults`
SCHEMAS = [
    ("eval", "eval_schema", EvalConfig),
    ("rollout", "hf_schema", HFRolloutConfig),
    ("rollout", "vllm_schema", VLLMRolloutConfig),
    ("task", "task_schema", TaskConfig),
    ("task", "reasoning_gym_schema", ReasoningGymTaskConfig),
    ("stage", "sft_schema", SFTStageConfig),
    ("stage", "rloo_schema", RLOOStageConfig),
    ("stage", "preference_schema", PreferenceStageConfig),
    ("tool", "tool_schema", ToolConfig),
    ("tool", "annealed_schema", AnnealedToolConfig),
    ("tool", "stepped_schema", SteppedToolConfig),
    ("tool", "oracle_schema", OracleToolConfig),
    ("curriculum", "none_schema", UniformCurriculum),
    ("curriculum", "static_schema", StaticCurriculum),
    ("curriculum", "static_thirds_schema", StaticThirdsCurriculum),
    ("curriculum", "threshold_schema", ThresholdCurriculum),
    ("curriculum", "frontier_schema", FrontierCurriculum),
    ("curriculum", "frontier_replay_schema", FrontierReplayCurriculum),
    ("curriculum", "dots_schema", DotsCurriculum),
]


def register() -> None:
    store = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        store.store(group=group, name=name, node=node)


register()
