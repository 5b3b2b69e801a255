"""`stage=rloo`: online RL (ablate.lit.rloo learning from ablate.lit.collector) with a rollout engine, a tool, a
curriculum and replay."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd
from omegaconf import DictConfig
from torch.utils.data import DataLoader
from transformers import AutoModel, AutoTokenizer

from ablate.check_registry import CHECKS
from ablate.config import require
from ablate.config.schemas import ToolConfig, config_schema, typed
from ablate.curriculum import ReplayBuffer, build_sampler, engagement_warnings
from ablate.curriculum.replay import ReplayConfig
from ablate.fit import fit, global_rank
from ablate.lit.collector import Collector
from ablate.models import encode_prompt, mean_pooled_embeddings, prompt_text
from ablate.objectives import (ADVANTAGE_SCALES, ADVANTAGES, AGGREGATIONS, CLIPPED_LOSSES, IS_MODES, KL_ESTIMATORS,
                               POLICY_LOSSES, PolicyLoss)
from ablate.rollout.engines import build_engine, check_rollout
from ablate.rollout.tools import build_tool
from ablate.rundir import RunDir
from ablate.stages.registry import STAGES, check_schedule

log = logging.getLogger("ablate.train")


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64


@config_schema("stage", "rloo_schema")
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

    @property
    def policy_loss(self) -> PolicyLoss:
        """The policy loss's keys as the one object the learner hands over (ablate.objectives.PolicyLoss)."""
        return PolicyLoss(level=self.is_level, clip=self.is_clip, clip_eps=self.clip_eps, aggregation=self.aggregation,
                          mode=self.is_mode, low=self.is_low, dual_clip=self.dual_clip,
                          clip_eps_low=self.clip_eps_low, clip_eps_high=self.clip_eps_high)


@config_schema("dynamic_sampling", "dynamic_sampling_schema")
@dataclass
class DynamicSamplingConfig:
    """`dynamic_sampling:` (conf/config.yaml; recipe=dapo turns it on): DAPO's filter-and-refill of RL groups."""

    enabled: bool = False
    max_gen_batches: int = 4


def fit_rloo(cfg: DictConfig, model, tokenizer, splits, task, run_dir: Path, status=None, callbacks=()) -> None:
    from ablate.lit.rloo import RLOOModule  # heavy: Lightning, off ablate.train's config refusal

    s, train_problems = cfg.stage, splits.train
    tool = build_tool(cfg.tool, tokenizer, cfg.model.template) if cfg.tool.schedule != "off" else None
    engine = build_engine(cfg, model, tokenizer, tool)
    sampler = build_sampler(cfg.get("curriculum"), train_problems, int(cfg.seed), s.max_steps,
                            embed=lambda: prompt_embeddings(cfg, model, tokenizer, train_problems, task), task=task)
    r = typed(ReplayConfig, cfg.replay)
    replay = ReplayBuffer(r.capacity, r.fresh_fraction, int(cfg.seed)) if r.enabled else None
    stage = typed(RLOOStageConfig, s)
    collector = Collector(train_problems, engine, task, sampler, stage, int(cfg.seed), tokenizer, cfg.model.template,
                          replay=replay, tool=typed(ToolConfig, cfg.tool),
                          dynamic_sampling=typed(DynamicSamplingConfig, cfg.dynamic_sampling))
    module = RLOOModule(model, tokenizer, collector, stage)
    # One item per optimizer step: prompts come from the sampler inside training_step.
    steps = DataLoader(range(s.max_steps), batch_size=None)
    try:
        fit(cfg, module, run_dir, dataloader=steps, callbacks=callbacks)
    finally:  # rollout=vllm holds a vLLM engine: release it before a sweep's next job builds one
        getattr(engine, "close", lambda: None)()
    if status is not None and global_rank() == 0:
        record_engagement(cfg, run_dir, status)


def prompt_embeddings(cfg: DictConfig, model, tokenizer, problems, task):
    """DOTS's prompt embeddings: the starting policy's (curriculum.embedding=policy) or a Hugging Face
    encoder's mean-pooled last hidden state over each training prompt, computed once."""
    texts = [prompt_text(task, p, cfg.model.template, tokenizer) for p in problems]
    name = cfg.curriculum.embedding  # only DOTS asks for embeddings, and its schema has the key
    if name == "policy":
        return mean_pooled_embeddings(model, [encode_prompt(t, tokenizer) for t in texts], tokenizer.pad_token_id)
    encoder_tokenizer = AutoTokenizer.from_pretrained(name)
    encoder = AutoModel.from_pretrained(name).eval()
    ids = [encoder_tokenizer(t)["input_ids"] for t in texts]
    return mean_pooled_embeddings(encoder, ids, encoder_tokenizer.pad_token_id or 0)


def record_engagement(cfg: DictConfig, run_dir: Path, status) -> None:
    """Warn (log, status.json `warnings`) when the curriculum ended the run behaving as uniform sampling."""
    metrics = RunDir(run_dir).metrics_file
    if not cfg.get("curriculum") or not metrics.is_file():
        return
    found = engagement_warnings(cfg.curriculum.kind, pd.read_csv(metrics), cfg.curriculum)
    for warning in found:
        log.warning("%s", warning)
    status.update(warnings=found)


def check_rloo(cfg: DictConfig) -> None:
    """`stage=rloo` config, with its rollout engine: ConfigError naming the key and the fix."""
    s = cfg.stage
    check_schedule(s, ("batch_prompts", "max_steps", "micro_batch", "pool_size", "checkpoint_every", "ppo_epochs",
                       "ppo_mini_batches"))
    require(s.k >= 2, f"stage.k={s.k}: RLOO needs at least 2 samples per prompt")
    require(s.micro_batch_tokens is None or s.micro_batch_tokens >= 1,
            f"stage.micro_batch_tokens={s.micro_batch_tokens} must be >= 1 (padded tokens per micro-batch), or "
            "null for stage.micro_batch sequences each")
    require(s.advantage in ADVANTAGES, f"stage.advantage={s.advantage!r}: expected one of {tuple(ADVANTAGES)}")
    require(s.advantage_scale in ADVANTAGE_SCALES,
            f"stage.advantage_scale={s.advantage_scale!r}: expected one of {tuple(ADVANTAGE_SCALES)}")
    require(s.advantage != "grpo" or s.advantage_scale == "none",
            f"stage.advantage=grpo already divides by the group's std; for stage.advantage_scale={s.advantage_scale} "
            "take the group mean alone: stage.advantage=group_mean")
    require(s.is_level in POLICY_LOSSES, f"stage.is_level={s.is_level!r}: expected one of {tuple(POLICY_LOSSES)}")
    check_clip(s, CLIPPED_LOSSES)
    require(s.is_mode in IS_MODES, f"stage.is_mode={s.is_mode!r}: expected one of {IS_MODES}")
    require(0 <= s.is_low < s.is_clip,
            f"stage.is_low={s.is_low} must be in [0, stage.is_clip={s.is_clip}) (the importance weights kept or "
            "truncated lie in [is_low, is_clip])")
    if s.dual_clip is not None:
        require(s.is_level == "token", f"stage.dual_clip={s.dual_clip} caps token-level PPO's loss on negative "
                                       f"advantages; it needs stage.is_level=token, not {s.is_level}")
        require(s.dual_clip > 1, f"stage.dual_clip={s.dual_clip} must be > 1 (3.0 in Ye et al. and verl)")
    require(s.aggregation in AGGREGATIONS,
            f"stage.aggregation={s.aggregation!r}: expected one of {tuple(AGGREGATIONS)}")
    require(s.kl_estimator in KL_ESTIMATORS, f"stage.kl_estimator={s.kl_estimator!r}: expected one of {tuple(KL_ESTIMATORS)}")
    require(s.reference_dtype in ("float32", "bfloat16", "auto"),
            f"stage.reference_dtype={s.reference_dtype!r}: expected float32, bfloat16 or auto (bfloat16 where the "
            "hardware multiplies it natively)")
    require(s.sampling.temperature > 0 and 0 < s.sampling.top_p <= 1,
            "stage.sampling.temperature must be > 0 and stage.sampling.top_p in (0, 1]")
    check_rollout(cfg.rollout, cfg.model, cfg.trainer)


def check_clip(s: DictConfig, clipped: tuple[str, ...]) -> None:
    """The ratio clip of the clipped losses (clip-higher, CISPO) and the overlong options."""
    for key in ("clip_eps", "clip_eps_low", "clip_eps_high"):
        if s[key] is not None:
            require(s[key] > 0, f"stage.{key}={s[key]} must be > 0")
            require(key == "clip_eps" or s.is_level in clipped,
                    f"stage.{key}={s[key]} clips the ratio of stage.is_level in {clipped}, not {s.is_level}")
    if s.is_level in clipped:
        key = "clip_eps" if s.clip_eps_low is None else "clip_eps_low"
        require(s[key] <= 1, f"stage.{key}={s[key]} must be <= 1 (the ratio's lower bound 1 - eps is >= 0)")
    if s.is_level == "cispo":
        require(s.is_mode == "truncate", f"stage.is_level=cispo clips its weights; stage.is_mode={s.is_mode} "
                                         "is for the other losses: set stage.is_mode=truncate")
    require(0 <= s.overlong_buffer <= s.sampling.max_new_tokens,
            f"stage.overlong_buffer={s.overlong_buffer} must be in [0, stage.sampling.max_new_tokens="
            f"{s.sampling.max_new_tokens}] (the last tokens of the budget that cost reward; 0: off)")
    require(s.overlong_penalty >= 0, f"stage.overlong_penalty={s.overlong_penalty} must be >= 0")


@CHECKS.register("dynamic_sampling", order=55)
def check_dynamic_sampling(cfg: DictConfig) -> None:
    """`dynamic_sampling=` config: it filters RL rollout groups."""
    d = cfg.dynamic_sampling
    if d.enabled:
        require(cfg.stage.name == "rloo", f"dynamic_sampling.enabled=true filters RL rollout groups; it needs "
                                          f"stage=rloo, not stage={cfg.stage.name}")
        require(int(d.max_gen_batches) >= 1, f"dynamic_sampling.max_gen_batches={d.max_gen_batches} must be >= 1 "
                                             "(generation batches per step, the first included)")


# the stage, registered last: what it is registered with is defined above
STAGES.register("rloo", check=check_rloo, schema=RLOOStageConfig,
                curriculum=lambda cfg: None)(fit_rloo)  # any curriculum chooses its prompts
